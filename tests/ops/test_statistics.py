import numpy as np
import pytest
import scipy.stats

from marllib_ext.ops.statistics import (
    evaluations_at,
    interval,
    iqm,
    maximum_and_average_return,
    mean,
    median,
    min_max_normalized,
    optimality_gap,
    performance_profile,
    probability_of_improvement,
    stratified_resample,
)


def test_literal_aggregates():
    scores = np.arange(1, 9, dtype=float).reshape(4, 2)  # runs x tasks
    assert iqm(scores) == 4.5  # middle half of 1..8: 3, 4, 5, 6
    assert mean(scores) == 4.5
    assert median(np.array([[0.0, 1.0, 5.0], [0.0, 3.0, 5.0]])) == 2.0  # task means 0, 2, 5
    assert optimality_gap(np.array([[0.5, 1.2], [0.0, 1.0]])) == pytest.approx(0.375)


def test_literal_probability_of_improvement():
    # pairs (1, 0) > , (1, 2) <, (2, 0) >, (2, 2) tie: (1 + 0 + 1 + 0.5) / 4
    assert probability_of_improvement(np.array([[1.0], [2.0]]), np.array([[0.0], [2.0]])) == 0.625
    x, y = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])  # one task each way
    assert probability_of_improvement(x, y) == 0.5
    with pytest.raises(ValueError, match="tasks"):
        probability_of_improvement(np.zeros((2, 2)), np.zeros((2, 3)))


def test_against_slow_references():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(7, 3))
    assert iqm(scores) == pytest.approx(scipy.stats.trim_mean(scores.ravel(), 0.25))
    assert median(scores) == pytest.approx(np.median([scores[:, t].mean() for t in range(3)]))
    other = rng.normal(size=(5, 3))
    per_task = [
        scipy.stats.mannwhitneyu(scores[:, t], other[:, t]).statistic / (7 * 5) for t in range(3)
    ]
    assert probability_of_improvement(scores, other) == pytest.approx(np.mean(per_task))
    loops = np.mean(
        [
            sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in scores[:, t] for b in other[:, t])
            / 35
            for t in range(3)
        ]
    )
    assert probability_of_improvement(scores, other) == pytest.approx(loops)


def test_stratified_resample_keeps_each_task_column():
    scores = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    drawn = stratified_resample(scores, np.random.default_rng(1))
    assert set(drawn[:, 0]) <= {1.0, 2.0, 3.0} and set(drawn[:, 1]) <= {10.0, 20.0, 30.0}


def test_interval_brackets_the_point_and_collapses_without_spread():
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(10, 4))
    point, low, high = interval(iqm, scores, reps=500)
    assert low <= point <= high and high - low > 0
    assert interval(iqm, np.ones((5, 2)), reps=50) == (1.0, 1.0, 1.0)
    p, lo, hi = interval(probability_of_improvement, scores + 10, scores, reps=100)
    assert p == lo == hi == 1.0


def test_performance_profile_and_normalization():
    scores = np.array([[0.0, 0.5], [1.0, 0.25]])
    np.testing.assert_allclose(performance_profile(scores, [-1, 0.2, 0.5, 1.0]), [1, 0.75, 0.25, 0])
    normalized = min_max_normalized({"a": np.array([[0.0, 2.0]]), "b": np.array([[4.0, 2.0]])})
    np.testing.assert_allclose(normalized["a"], [[0.0, 0.0]])
    np.testing.assert_allclose(normalized["b"], [[1.0, 0.0]])  # equal scores on task 2: 0


def test_against_rliable_where_installed():
    """The same scores through rliable (an optional extra; its ``arch`` dependency does
    not import with pandas 3, so this runs only where an older pandas is installed)."""
    try:
        from rliable import library as rly
        from rliable import metrics
    except Exception:  # noqa: BLE001 - ImportError or arch's TypeError under pandas 3
        pytest.skip("rliable is not importable here")
    rng = np.random.default_rng(3)
    x, y = rng.random((6, 3)), rng.random((6, 3))
    assert iqm(x) == pytest.approx(metrics.aggregate_iqm(x))
    assert optimality_gap(x) == pytest.approx(metrics.aggregate_optimality_gap(x))
    assert probability_of_improvement(x, y) == pytest.approx(
        metrics.probability_of_improvement(x, y)
    )
    _, (low, high) = next(
        iter(
            rly.get_interval_estimates({"x": x}, lambda s: np.array([iqm(s)]), reps=2000)[1].items()
        )
    )
    point, ours_low, ours_high = interval(iqm, x, reps=2000)
    assert abs(ours_low - low[0]) < 0.05 and abs(ours_high - high[0]) < 0.05


def test_literal_evaluations_on_epymarls_grid():
    # run 0 evaluated at 30 and 70, run 1 at 50 and 110; grid 50, 100 (budget 120)
    at_grid = evaluations_at(
        [np.array([30.0, 70.0]), np.array([50.0, 110.0])],
        [np.array([0.1, 0.5]), np.array([0.2, 0.9])],
        interval=50,
        budget=120,
    )
    np.testing.assert_array_equal(at_grid, [[0.1, 0.2], [0.5, 0.2]])
    # means over runs 0.15 and 0.35
    assert maximum_and_average_return(at_grid) == pytest.approx((0.35, 0.25))


def test_grid_points_before_a_runs_first_evaluation_are_left_out():
    at_grid = evaluations_at(
        [np.array([10.0]), np.array([60.0])], [np.ones(1), np.zeros(1)], 50, 100
    )
    assert np.isnan(at_grid[0, 1])
    assert maximum_and_average_return(at_grid) == (0.5, 0.5)
    with pytest.raises(ValueError, match="every run"):
        maximum_and_average_return(at_grid[:1])


def test_evaluations_at_against_a_loop():
    rng = np.random.default_rng(0)
    steps = [np.sort(rng.uniform(0, 1000, size=n)) for n in (5, 9, 14)]
    values = [rng.normal(size=len(s)) for s in steps]
    at_grid = evaluations_at(steps, values, interval=100, budget=1000)
    for g, point in enumerate(range(100, 1001, 100)):
        for i in range(3):
            seen = [v for s, v in zip(steps[i], values[i], strict=True) if s <= point]
            expected = seen[-1] if seen else np.nan
            np.testing.assert_equal(at_grid[g, i], expected)
    complete = [row for row in at_grid if not np.isnan(row).any()]
    means = [sum(row) / 3 for row in complete]
    assert maximum_and_average_return(at_grid) == pytest.approx(
        (max(means), sum(means) / len(means))
    )
