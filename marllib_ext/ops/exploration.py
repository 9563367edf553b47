"""Exploration measures that do not come from any method: how many distinct joint states
an episode visits, and the entropy of the state-visitation distribution on a fixed grid."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def distinct_rows(states: npt.ArrayLike, *, decimals: int = 6) -> int:
    """The number of distinct joint states among ``states``.

    Args:
        states: ``(T, d)`` one joint state per row (e.g. every agent's observation at
            one env step, concatenated).
        decimals: rows are compared after rounding to this many decimals, so float
            noise from normalization does not split one state in two.

    Returns:
        ``|{states[t] : t < T}|``; 0 for ``T = 0``.
    """
    states = np.asarray(states, dtype=np.float64)
    if states.ndim != 2:
        raise ValueError(f"states has shape {states.shape}, expected (T, d)")
    if len(states) == 0:
        return 0
    return int(len(np.unique(np.round(states, decimals), axis=0)))


def visitation_entropy(
    states: npt.ArrayLike, *, low: npt.ArrayLike, high: npt.ArrayLike, bins: int
) -> float:
    """Entropy (nats) of the empirical state-visitation distribution on a fixed grid.

    Each dimension ``k`` of ``[low[k], high[k]]`` is cut into ``bins`` equal cells
    (values outside are clipped into the first or last cell); a state's cell is the
    tuple of its per-dimension cells, and ``H = -sum_c p_c log p_c`` with ``p_c`` the
    share of ``states`` in cell ``c``. The grid depends only on the bounds, so two
    policies' entropies compare on one discretization.

    Args:
        states: ``(N, d)``.
        low, high: ``(d,)`` finite bounds, ``high > low``.
        bins: cells per dimension (>= 1).
    """
    states = np.asarray(states, dtype=np.float64)
    low = np.asarray(low, dtype=np.float64)
    high = np.asarray(high, dtype=np.float64)
    if states.ndim != 2 or low.shape != (states.shape[1],) or high.shape != low.shape:
        raise ValueError(
            f"states {states.shape}, low {low.shape}, high {high.shape}: "
            "expected (N, d), (d,), (d,)"
        )
    if bins < 1 or not np.all(np.isfinite(low) & np.isfinite(high) & (high > low)):
        raise ValueError("visitation_entropy needs bins >= 1 and finite bounds with high > low")
    if len(states) == 0:
        return 0.0
    cells = np.floor((states - low) / (high - low) * bins).astype(np.int64)
    cells = np.clip(cells, 0, bins - 1)
    _, counts = np.unique(cells, axis=0, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def return_at_exploration(
    exploration: npt.ArrayLike, returns: npt.ArrayLike, level: float
) -> float:
    """The extrinsic return of a trade-off curve at one exploration level.

    The curve is the points ``(exploration[k], returns[k])`` (e.g. one per budget z);
    its return at ``level`` is the best of: the returns of points that explore at least
    ``level``, and the linear interpolation between the points on either side of
    ``level``. Interpolation is what playing the two budgets in alternate episodes
    gives for per-episode means (distinct states per episode, return). NaN when no
    point reaches ``level``.

    Args:
        exploration, returns: ``(K,)``.
        level: the exploration level to read the curve at.
    """
    exploration = np.asarray(exploration, dtype=np.float64)
    returns = np.asarray(returns, dtype=np.float64)
    if exploration.shape != returns.shape or exploration.ndim != 1:
        raise ValueError(
            f"exploration {exploration.shape} and returns {returns.shape}: expected (K,)"
        )
    reaching = exploration >= level
    if not reaching.any():
        return float("nan")
    best = float(returns[reaching].max())
    order = np.argsort(exploration)
    x, y = exploration[order], returns[order]
    if x[0] <= level <= x[-1]:
        best = max(best, float(np.interp(level, x, y)))
    return best
