"""Aggregate statistics of runs the way the field reports them (Agarwal et al. 2021,
"Deep RL at the Edge of the Statistical Precipice"; Gorsane et al. 2022, the
cooperative-MARL evaluation protocol), in numpy (no Ray import).

Scores are ``(runs, tasks)`` arrays of one algorithm, normalized per task so that
tasks can be pooled. Interval estimates come from the stratified bootstrap: each
task's runs are resampled with replacement independently, the statistic recomputed,
and the 95% interval is the 2.5 and 97.5 percentiles of the replicates (rliable's
``get_interval_estimates`` with its default percentile method)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of every (run, task) score: the mean of the middle 50%,
    dropping the lowest and highest 25% (``scipy.stats.trim_mean(x, 0.25)``: with
    ``n`` scores, ``floor(n / 4)`` cut at each end)."""
    values = np.sort(np.asarray(scores, float).ravel())
    cut = int(0.25 * len(values))
    return float(values[cut : len(values) - cut].mean())


def median(scores: np.ndarray) -> float:
    """Median over tasks of each task's mean score over runs."""
    return float(np.median(np.asarray(scores, float).mean(axis=0)))


def mean(scores: np.ndarray) -> float:
    """Mean over tasks of each task's mean score over runs."""
    return float(np.asarray(scores, float).mean(axis=0).mean())


def optimality_gap(scores: np.ndarray, threshold: float = 1.0) -> float:
    """``mean(max(threshold - x, 0))``: how far the scores fall short of
    ``threshold`` on average (scores above it count 0)."""
    return float(np.maximum(threshold - np.asarray(scores, float), 0.0).mean())


AGGREGATES: dict[str, Callable[[np.ndarray], float]] = {
    "IQM": iqm,
    "median": median,
    "mean": mean,
    "optimality gap": optimality_gap,
}


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """``P(X > Y)``: for each task the probability that a run of X scores above a run
    of Y, ties counting a half (the Mann-Whitney statistic over ``runs_x * runs_y``
    pairs), averaged over tasks. ``x``: ``(runs_x, tasks)``, ``y``: ``(runs_y,
    tasks)``."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x has {x.shape[1]} tasks and y {y.shape[1]}")
    above = (x[:, None, :] > y[None, :, :]).mean(axis=(0, 1))
    tied = (x[:, None, :] == y[None, :, :]).mean(axis=(0, 1))
    return float((above + 0.5 * tied).mean())


def stratified_resample(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``scores`` with each task's runs drawn with replacement, independently per task."""
    runs, tasks = scores.shape
    picks = rng.integers(0, runs, size=(runs, tasks))
    return scores[picks, np.arange(tasks)]


def interval(
    statistic: Callable[..., float],
    *scores: np.ndarray,
    reps: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """``(point, low, high)``: ``statistic(*scores)`` and its stratified-bootstrap
    percentile interval, each array of ``scores`` resampled independently per task in
    every replicate."""
    arrays = [np.asarray(s, float) for s in scores]
    rng = np.random.default_rng(seed)
    replicates = np.array(
        [statistic(*(stratified_resample(a, rng) for a in arrays)) for _ in range(reps)]
    )
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return statistic(*arrays), float(low), float(high)


def performance_profile(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """``(len(thresholds),)``: the fraction of (run, task) scores above each threshold
    (the run-score distribution)."""
    values = np.asarray(scores, float).ravel()
    return (values[None, :] > np.asarray(thresholds, float)[:, None]).mean(axis=1)


def min_max_normalized(scores: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each algorithm's ``(runs, tasks)`` scores scaled per task to ``[0, 1]`` by the
    lowest and highest score any algorithm reached on the task (marl-eval's
    normalization); a task where every score is equal maps to 0."""
    pooled = np.concatenate([np.asarray(s, float) for s in scores.values()])
    low, high = pooled.min(axis=0), pooled.max(axis=0)
    span = np.where(high > low, high - low, 1.0)
    return {name: (np.asarray(s, float) - low) / span for name, s in scores.items()}


def evaluations_at(
    steps: list[np.ndarray], values: list[np.ndarray], interval: float, budget: float
) -> np.ndarray:
    """The evaluations of several runs on a common env-step grid, as EPyMARL tests:
    at each grid point ``g = interval, 2 interval, ..., <= budget`` every run's most
    recent evaluation at or before ``g``.

    ``steps[i], values[i]``: ``(E_i,)`` env steps (increasing) and evaluation means of
    run ``i``. Returns ``(G, runs)``, NaN where a run has no evaluation yet at ``g``."""
    grid = np.arange(1, int(budget // interval) + 1) * float(interval)
    out = np.full((len(grid), len(steps)), np.nan)
    for i, (run_steps, run_values) in enumerate(zip(steps, values, strict=True)):
        run_steps, run_values = np.asarray(run_steps, float), np.asarray(run_values, float)
        latest = np.searchsorted(run_steps, grid, side="right") - 1
        seen = latest >= 0
        out[seen, i] = run_values[latest[seen]]
    return out


def maximum_and_average_return(at_grid: np.ndarray) -> tuple[float, float]:
    """EPyMARL's two summaries of evaluations during training (Papoudakis et al. 2021,
    "Benchmarking Multi-Agent Deep RL Algorithms in Cooperative Tasks"): with
    ``m_g = mean_i at_grid[g, i]`` the mean over runs at grid point ``g``, the maximum
    return ``max_g m_g`` and the average return ``mean_g m_g``, over the grid points
    every run has reached.

    ``at_grid``: ``(G, runs)`` from :func:`evaluations_at`."""
    at_grid = np.asarray(at_grid, float)
    complete = at_grid[~np.isnan(at_grid).any(axis=1)]
    if not len(complete):
        raise ValueError("no grid point where every run has an evaluation")
    across_runs = complete.mean(axis=1)
    return float(across_runs.max()), float(across_runs.mean())


# Student's t 0.975 quantiles for 1..30 degrees of freedom.
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip


def t_quantile_975(dof: int) -> float:
    """Student's t 0.975 quantile: the table above for ``dof <= 30``, else the
    Cornish-Fisher expansion around z = 1.95996 (error below 1e-4 there)."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    if dof <= len(_T975):
        return _T975[dof - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def student_t_interval(scores: np.ndarray) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``scores`` ``(n,)`` and its 95% confidence
    interval ``mean +- t_{0.975, n-1} * s / sqrt(n)`` (``s``: the sample standard
    deviation); NaN bounds for one score."""
    scores = np.asarray(scores, dtype=np.float64)
    center = float(np.mean(scores))
    if scores.size < 2:
        return center, float("nan"), float("nan")
    half = t_quantile_975(scores.size - 1) * float(np.std(scores, ddof=1)) / np.sqrt(scores.size)
    return center, center - half, center + half
