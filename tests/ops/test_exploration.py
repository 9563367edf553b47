"""Exploration measures: distinct joint states, visitation entropy, a frontier's return."""

import itertools
import math

import numpy as np
import pytest

from marllib_ext.ops.exploration import distinct_rows, return_at_exploration, visitation_entropy


def slow_distinct(states, decimals=6):
    return len({tuple(round(float(v), decimals) for v in row) for row in states})


def slow_entropy(states, low, high, bins):
    counts = {}
    for row in states:
        cell = []
        for v, lo, hi in zip(row, low, high, strict=True):
            k = math.floor((v - lo) / (hi - lo) * bins)
            cell.append(min(max(k, 0), bins - 1))
        counts[tuple(cell)] = counts.get(tuple(cell), 0) + 1
    n = sum(counts.values())
    return -sum(c / n * math.log(c / n) for c in counts.values())


def test_distinct_rows_literal():
    states = [[0.0, 0.25], [0.0, 0.25], [0.25, 0.0], [0.0, 0.25 + 1e-9]]
    assert distinct_rows(states) == 2  # float noise below the rounding does not split
    assert distinct_rows(np.zeros((0, 3))) == 0
    with pytest.raises(ValueError, match="expected"):
        distinct_rows([1.0, 2.0])


def test_visitation_entropy_literal():
    # two cells, equally visited: log 2; one cell: 0; values past the bounds clip in
    assert visitation_entropy([[0.1], [0.9]], low=[0.0], high=[1.0], bins=2) == pytest.approx(
        math.log(2)
    )
    assert visitation_entropy([[0.1], [0.2], [-5.0]], low=[0.0], high=[1.0], bins=2) == 0.0
    with pytest.raises(ValueError, match="high > low"):
        visitation_entropy([[0.1]], low=[1.0], high=[1.0], bins=2)


def test_measures_match_slow_references():
    rng = np.random.default_rng(0)
    for n, d, bins in itertools.product((1, 7, 50), (1, 3), (1, 4)):
        states = rng.integers(0, 4, size=(n, d)) / 3.0 + rng.normal(0, 0.3, size=(n, d)) * (d == 1)
        low, high = np.full(d, -0.5), np.full(d, 1.5)
        assert distinct_rows(states) == slow_distinct(states)
        assert visitation_entropy(states, low=low, high=high, bins=bins) == pytest.approx(
            slow_entropy(states, low, high, bins)
        )


def test_return_at_exploration_literal():
    exploration, returns = [10.0, 40.0, 25.0], [2.0, 0.5, 1.8]
    # a point that explores at least as much, or the interpolation between neighbours
    assert return_at_exploration(exploration, returns, 20.0) == pytest.approx(
        2.0 + (20 - 10) / 15 * (1.8 - 2.0)
    )
    assert return_at_exploration(exploration, returns, 30.0) == pytest.approx(
        1.8 + (30 - 25) / 15 * (0.5 - 1.8)
    )
    assert return_at_exploration(exploration, returns, 5.0) == 2.0
    assert return_at_exploration([10.0, 40.0], [0.0, 1.0], 10.0) == 1.0  # more, and better
    assert math.isnan(return_at_exploration(exploration, returns, 41.0))
