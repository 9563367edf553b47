"""The replay sampling distribution's distance from uniform: literal cases and a slow
reference."""

import numpy as np
import pytest

from marllib_ext.ops.replay_spread import sampling_spread


def test_uniform_weights_are_at_zero_distance():
    spread = sampling_spread(np.full(7, 3.0))
    assert spread["total_variation"] == pytest.approx(0.0)
    assert spread["effective_fraction"] == pytest.approx(1.0)
    assert spread["max_over_mean"] == pytest.approx(1.0)


def test_literal_case():
    # q = [0.5, 0.25, 0.25, 0]; uniform 0.25 each: TV = (0.25 + 0 + 0 + 0.25) / 2.
    spread = sampling_spread([2.0, 1.0, 1.0, 0.0])
    assert spread["total_variation"] == pytest.approx(0.25)
    # 1 / (4 * (0.25 + 0.0625 + 0.0625)) = 1 / 1.5
    assert spread["effective_fraction"] == pytest.approx(2.0 / 3.0)
    assert spread["max_over_mean"] == pytest.approx(2.0)


def test_one_row_taking_every_draw():
    spread = sampling_spread([0.0, 0.0, 5.0, 0.0, 0.0])
    assert spread["total_variation"] == pytest.approx(1.0 - 1.0 / 5.0)
    assert spread["effective_fraction"] == pytest.approx(1.0 / 5.0)


def test_against_a_slow_reference():
    rng = np.random.default_rng(0)
    w = rng.gamma(0.5, size=50)
    total = sum(w)
    tv = sum(abs(x / total - 1 / 50) for x in w) / 2
    ess = 1 / sum((x / total) ** 2 for x in w)
    spread = sampling_spread(w)
    assert spread["total_variation"] == pytest.approx(tv)
    assert spread["effective_fraction"] == pytest.approx(ess / 50)


@pytest.mark.parametrize("bad", [[], [0.0, 0.0], [1.0, -1.0], [1.0, np.nan]])
def test_bad_weights_are_refused(bad):
    with pytest.raises(ValueError, match="weights"):
        sampling_spread(bad)
