"""EFXplorer conservative exploration (seed 000), pure numpy, time-major.

Notation per episode segment (T = the segment's last step: episode end, or the chunk
end when the sampler cut the episode):

    r_int[t, i] = -c * log pi_i(a_i | o_i)          intrinsic reward, c = intrinsic_coef
    delta[t]    = sum_i r_int[t, i]                   team intrinsic reward
    z[0] = z_0,  z[t+1] = clip(z[t] - delta[t], z_low, z_high)   budget (undiscounted)
    S[t]        = sum_{k=t..T} delta[k] - z[t]        budget slack
    A[T] = min(A_ext[T], S[T]),  A[t] = min(A_ext[t], A[t+1])
         = min(A_ext[t], ..., A_ext[T], S[T])         conservative advantage

Without clipping, ``S`` is constant within a segment (seed eq. 1.3: S_t = S_{t+1}).
No intrinsic value function is used anywhere.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from marllib_ext.ops.advantages import _check_shape


def intrinsic_rewards(
    logp: npt.ArrayLike, *, coef: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``r_int = -coef * logp`` and ``delta = r_int.sum(axis=1)``.

    Args:
        logp: ``(T, n_agents)`` log-probabilities (or densities) of the sampled actions,
            recorded at sampling time.
        coef: intrinsic reward coefficient ``c``.

    Returns:
        ``(r_int (T, n_agents), delta (T,))``.
    """
    logp = np.asarray(logp, dtype=np.float64)
    if logp.ndim != 2:
        raise ValueError(f"logp has shape {logp.shape}, expected (T, n_agents)")
    r_int = -coef * logp
    return r_int, r_int.sum(axis=1)


def budget_step(z: float, delta: float, *, z_low: float, z_high: float) -> float:
    """One budget update ``clip(z - delta, z_low, z_high)`` (used step by step while
    sampling)."""
    return min(max(z - delta, z_low), z_high)


def budget_path(
    delta: npt.ArrayLike, *, z0: float, z_low: float, z_high: float
) -> npt.NDArray[np.float64]:
    """Budget along one episode segment.

    ``z[0] = z0``, ``z[t+1] = clip(z[t] - delta[t], z_low, z_high)``.

    Args:
        delta: ``(T,)`` team intrinsic rewards.
        z0: budget at the segment's first step (not clipped: it is what the actor saw).

    Returns:
        ``(T,)`` budget ``z[t]`` seen at each step. The clip makes this a sequential
        scan; it is a reference and test helper, the sampler applies :func:`budget_step`.
    """
    delta = np.asarray(delta, dtype=np.float64)
    if delta.ndim != 1:
        raise ValueError(f"delta has shape {delta.shape}, expected (T,)")
    if z_low > z_high:
        raise ValueError(f"z_low={z_low} must not exceed z_high={z_high}")
    z = np.empty_like(delta)
    current = float(z0)
    for t, step_delta in enumerate(delta.tolist()):
        z[t] = current
        current = budget_step(current, step_delta, z_low=z_low, z_high=z_high)
    return z


def budget_slack(delta: npt.ArrayLike, z: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``S[t] = sum_{k=t..T} delta[k] - z[t]`` for one segment.

    Args:
        delta: ``(T,)`` team intrinsic rewards.
        z: ``(T,)`` budget, or ``(T, n_agents)``.

    Returns:
        ``S`` with the shape of ``z``.
    """
    delta = np.asarray(delta, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64)
    if delta.ndim != 1 or z.shape[:1] != delta.shape:
        raise ValueError(f"delta has shape {delta.shape} and z {z.shape}; expected (T,), (T, ...)")
    intrinsic_to_go = np.cumsum(delta[::-1])[::-1]
    return intrinsic_to_go.reshape((-1,) + (1,) * (z.ndim - 1)) - z


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

    ends = np.flatnonzero(episode_ends)
    if ends.size == 0 or ends[-1] != horizon - 1:
        ends = np.append(ends, horizon - 1)
    starts = np.concatenate([[0], ends[:-1] + 1])
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
