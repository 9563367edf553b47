"""One rule per per_type: priorities written out from seed 003's and PER's formulas,
and how each rule samples (exponent, importance weights, EMA step)."""

import math
from dataclasses import dataclass

import pytest
import torch

from marllib_ext.replay.prioritization import PRIORITY_RULES, PrioritizedReplayFields

TD = torch.tensor([-3.0, -0.5, 0.0, 1.0, 8.0], dtype=torch.float64)


@dataclass(frozen=True)
class Fields(PrioritizedReplayFields):
    pass


def fields(**changes) -> Fields:
    values = dict(
        per_type="JS",
        temp=2.0,
        min_clip=0.5,
        max_clip=3.0,
        js_min_weight=0.5,
        js_max_weight=2.0,
        per_beta=0.25,
        std_normalize=False,
        per_alpha=0.6,
        per_importance_beta=0.4,
    )
    values.update(changes)
    return Fields(**values)


def test_js_priority_literal():
    priority, _ = PRIORITY_RULES["JS"].priorities(TD, fields())
    # delta / temp clipped to +-max_clip (3): the last row's 8 / 2 = 4 reads as 3.
    expected = [0.5 + 1.5 / (1 + math.exp(-max(-3.0, min(3.0, td / 2.0)))) for td in TD.tolist()]
    assert priority.tolist() == pytest.approx(expected)


def test_kl_priority_literal_with_its_clips():
    priority, _ = PRIORITY_RULES["KL"].priorities(TD, fields(per_type="KL"))
    expected = [min(max(math.exp(td / 2.0), 0.5), 3.0) for td in TD.tolist()]
    assert priority.tolist() == pytest.approx(expected)
    assert priority.tolist()[0] == 0.5 and priority.tolist()[-1] == 3.0  # both clips bind


def test_per_priority_is_the_absolute_td_error():
    priority, _ = PRIORITY_RULES["PER"].priorities(TD, fields(per_type="PER"))
    assert priority.tolist() == pytest.approx([abs(td) + 1e-6 for td in TD.tolist()])


def test_std_normalize_divides_by_the_batch_mean():
    for name in ("JS", "KL"):
        plain, _ = PRIORITY_RULES[name].priorities(TD, fields(per_type=name))
        scaled, _ = PRIORITY_RULES[name].priorities(TD, fields(per_type=name, std_normalize=True))
        torch.testing.assert_close(scaled, plain / plain.mean())


def test_the_three_rules_give_three_different_answers():
    answers = [PRIORITY_RULES[n].priorities(TD, fields(per_type=n))[0] for n in ("JS", "KL", "PER")]
    for i in range(3):
        for j in range(i + 1, 3):
            assert not torch.allclose(answers[i], answers[j])


def test_sampling_per_rule():
    f = fields()
    rules = {name: PRIORITY_RULES[name] for name in ("uniform", "PER", "KL", "JS")}
    assert [r.prioritized for r in rules.values()] == [False, True, True, True]
    # PER's exponents are PER's alone; ROER samples proportionally, without importance
    # weights, and blends the stored priority with per_beta.
    assert (rules["PER"].sampling_alpha(f), rules["PER"].importance_beta(f)) == (0.6, 0.4)
    assert rules["PER"].ema_step(f) == 1.0
    for name in ("KL", "JS"):
        assert (rules[name].sampling_alpha(f), rules[name].importance_beta(f)) == (1.0, 0.0)
        assert rules[name].ema_step(f) == 0.25
    assert rules["uniform"].importance_beta(f) == 0.0


def test_unknown_per_type_and_bad_values_name_the_key():
    from marllib_ext.algos.config import Settings
    from marllib_ext.errors import ConfigError

    @dataclass(frozen=True)
    class Checked(Settings, PrioritizedReplayFields):
        pass

    base = {k: v for k, v in vars(fields()).items()}
    with pytest.raises(ConfigError, match="per_type"):
        Checked(**{**base, "per_type": "TD"})
    with pytest.raises(ConfigError, match="per_importance_beta"):
        Checked(**{**base, "per_importance_beta": -1.0})
