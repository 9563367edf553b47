"""The conservative advantage, seed 000's reference form: a reversed running minimum
over each segment, ``A[t] = min(A_ext[t..T], S[T])``, and its per-segment slack."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from marllib_ext.ops.advantages import _check_shape


def _segments(episode_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` of the segments; the last index always ends one."""
    horizon = len(episode_ends)
    ends = np.flatnonzero(episode_ends)
    if ends.size == 0 or ends[-1] != horizon - 1:
        ends = np.append(ends, horizon - 1)
    return np.concatenate([[0], ends[:-1] + 1]).astype(np.int64), ends.astype(np.int64)


def segment_slack(
    delta: npt.ArrayLike, z: npt.ArrayLike, episode_ends: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """:func:`budget_slack` for many segments at once: ``S[t] = sum_{k=t..T_s} delta[k]
    - z[t]`` with ``T_s`` the end of ``t``'s segment.

    Args:
        delta: ``(T,)``; z: ``(T,)``; episode_ends: ``(T,)`` bool.

    Returns:
        ``(T,)`` slack.
    """
    delta = np.asarray(delta, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64)
    episode_ends = np.asarray(episode_ends, dtype=bool)
    _check_shape("z", z, delta.shape)
    _check_shape("episode_ends", episode_ends, delta.shape)
    if delta.size == 0:
        return delta.copy()
    starts, ends = _segments(episode_ends)
    cumulative = np.cumsum(delta)
    segment_end = np.repeat(ends, ends - starts + 1)
    return cumulative[segment_end] - cumulative + delta - z


def conservative_advantage(
    a_ext: npt.ArrayLike,
    delta: npt.ArrayLike,
    z: npt.ArrayLike,
    episode_ends: npt.ArrayLike,
) -> npt.NDArray[np.float64]:
    """Conservative advantage ``A[t] = min(A_ext[t..T_s], S[T_s])`` per segment.

    Segments end where ``episode_ends`` is set (episode end or chunk end); the last
    index always ends one. Since ``S[T_s] = delta[T_s] - z[T_s]``, only the segment's
    last step enters through ``S``. Computed as a reversed cumulative minimum, batched
    over all segments of equal length (no loop over time steps).

    Args:
        a_ext: ``(T, n_agents)`` extrinsic advantages (``(T,)`` also accepted).
        delta: ``(T,)`` team intrinsic rewards.
        z: ``(T,)`` shared budget, or ``(T, n_agents)``.
        episode_ends: ``(T,)`` bool, True on each segment's last step.

    Returns:
        Conservative advantages with the shape of ``a_ext``.
    """
    a_ext = np.asarray(a_ext, dtype=np.float64)
    squeeze = a_ext.ndim == 1
    if squeeze:
        a_ext = a_ext[:, None]
    if a_ext.ndim != 2:
        raise ValueError(f"a_ext has shape {a_ext.shape}, expected (T, n_agents)")
    horizon, n_agents = a_ext.shape
    delta = np.asarray(delta, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64)
    episode_ends = np.asarray(episode_ends, dtype=bool)
    _check_shape("delta", delta, (horizon,))
    _check_shape("episode_ends", episode_ends, (horizon,))
    if z.shape not in ((horizon,), (horizon, n_agents)):
        raise ValueError(f"z has shape {z.shape}, expected {(horizon,)} or {(horizon, n_agents)}")
    if horizon == 0:
        return a_ext[:, 0] if squeeze else a_ext
    z = np.broadcast_to(z.reshape(horizon, -1), (horizon, n_agents))

    starts, ends = _segments(episode_ends)
    lengths = ends - starts + 1

    values = a_ext.copy()
    slack_at_end = delta[ends, None] - z[ends]  # S[T_s] = delta[T_s] - z[T_s]
    values[ends] = np.minimum(values[ends], slack_at_end)
    result = np.empty_like(values)
    for length in np.unique(lengths):  # one batched pass per distinct segment length
        rows = starts[lengths == length, None] + np.arange(length)  # (n_segments, length)
        block = values[rows][:, ::-1]
        result[rows] = np.minimum.accumulate(block, axis=1)[:, ::-1]
    return result[:, 0] if squeeze else result


def seed_dp_binding(
    a_ext: npt.ArrayLike,
    delta: npt.ArrayLike,
    z: npt.ArrayLike,
    episode_ends: npt.ArrayLike,
) -> npt.NDArray[np.bool_]:
    """``(T,)`` (or ``(T, n_agents)``) rows where :func:`conservative_advantage` takes
    its value from ``S[T_s]`` rather than from some ``A_ext[k]``: where
    ``S[T_s] < min(A_ext[t..T_s])``."""
    horizon = len(np.asarray(delta))
    without_slack = conservative_advantage(  # z = -inf: S = +inf never binds
        a_ext, np.zeros(horizon), np.full(horizon, -np.inf), episode_ends
    )
    return conservative_advantage(a_ext, delta, z, episode_ends) < without_slack
