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

Budget units: z is the team intrinsic return the episode still has to collect, in
``[0, Z_max]`` with ``Z_max = c * T_max * sum_i H_max(i)`` (:func:`intrinsic_budget_bound`).

Advantage forms (``efx_advantage``):

    seed_dp:   A[t] = min(A_ext[t..T], S[T])                         (seed 000, reference)
    per_step:  A[t] = min(Â_ext[t], kappa * S[t] / (z_high - z_low))
    hinge:     A[t] = min(Â_ext[t], kappa * S[t] / (z_high - z_low))  where S[t] < 0,
               A[t] = Â_ext[t]                                       elsewhere

    demand_push: A[t, i] = hinge[t] + w[t] * (-log pi_i(a|o_t) - H_i(o_t)),
               w[t] = kappa * min(1, max(0, -S[t]) / (z_high - floor))

with ``Â_ext`` the extrinsic advantage standardized over valid rows. ``hinge`` leaves a
row's own extrinsic signal untouched unless the episode is short of its budget there.
``demand_push`` adds, on rows whose segment is short of its budget, each agent's
per-step intrinsic advantage with the policy's own entropy as the state baseline,
weighted by the shortfall: its expected policy gradient is ``w[t] * grad H_i(o_t)``, a
push toward higher intrinsic reward at every unmet state. Rows that meet their budget
get ``w = 0``: the conservative extrinsic advantage alone. ``floor`` is ``z_low``, or
with ``budget_range: tracked`` the team's intrinsic return without a demand
(:class:`BudgetController`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from marllib_ext.ops.advantages import _check_shape

GAUSSIAN_ENTROPY_UNIT_STD = 0.5 * float(np.log(2.0 * np.pi * np.e))  # H[N(mu, 1)] per dim


def intrinsic_budget_bound(
    *, coef: float, max_episode_steps: int, max_entropies: npt.ArrayLike
) -> float:
    """``Z_max = c * T_max * sum_i H_max(i)``: the team intrinsic return of a whole
    episode at every agent's maximum entropy.

    Args:
        coef: intrinsic reward coefficient ``c``.
        max_episode_steps: ``T_max``, the env's declared maximum episode length.
        max_entropies: ``(n_agents,)`` ``H_max(i)``: ``log|A_i|`` for a discrete action
            space, the initial Gaussian policy's entropy summed over dimensions for a
            continuous one (:func:`max_action_entropy`).
    """
    if max_episode_steps < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
    entropies = np.asarray(max_entropies, dtype=np.float64)
    return float(coef * max_episode_steps * entropies.sum())


def max_action_entropy(
    n_actions: int | None = None,
    *,
    nvec: npt.ArrayLike | None = None,
    continuous_dims: int | None = None,
    entropy_per_dim: float = GAUSSIAN_ENTROPY_UNIT_STD,
) -> float:
    """``H_max`` of one agent: ``log n`` (Discrete), ``sum_k log n_k`` (MultiDiscrete)
    or ``continuous_dims * entropy_per_dim`` (Box; by default the entropy of the unit
    Gaussian, ``0.5 * log(2 pi e)`` per dimension, which is RLlib's initial policy)."""
    if n_actions is not None:
        return float(np.log(n_actions))
    if nvec is not None:
        return float(np.log(np.asarray(nvec, dtype=np.float64)).sum())
    if continuous_dims is not None:
        return float(continuous_dims * entropy_per_dim)
    raise ValueError("max_action_entropy needs n_actions, nvec or continuous_dims")


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


def slack_cap_advantage(
    a_ext_standardized: npt.ArrayLike,
    slack: npt.ArrayLike,
    *,
    kappa: float,
    z_range: float,
    only_unmet: bool,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Per-step conservative advantage ``A[t] = min(Â_ext[t], kappa * S[t] / z_range)``.

    ``only_unmet=False`` is the ``per_step`` form (every row is capped);
    ``only_unmet=True`` is ``hinge``: the cap applies only where ``S[t] < 0`` (the
    budget still to collect exceeds the segment's remaining intrinsic return).

    Args:
        a_ext_standardized: ``(T,)`` or ``(T, n_agents)`` ``Â_ext``, standardized over
            valid rows.
        slack: ``(T,)`` ``S[t]`` (:func:`segment_slack`), broadcast over agents.
        kappa: scale of the cap in standardized-advantage units per budget range.
        z_range: ``z_high - z_low`` (> 0).

    Returns:
        ``(advantages, binding)``, both shaped like ``a_ext_standardized``; ``binding``
        marks rows whose value comes from the slack term.
    """
    if z_range <= 0:
        raise ValueError(f"z_range must be > 0, got {z_range}")
    a_hat = np.asarray(a_ext_standardized, dtype=np.float64)
    slack = np.asarray(slack, dtype=np.float64)
    if slack.shape != a_hat.shape[:1]:
        raise ValueError(f"slack has shape {slack.shape}, expected {a_hat.shape[:1]}")
    cap = (kappa * slack / z_range).reshape((-1,) + (1,) * (a_hat.ndim - 1))
    binding = cap < a_hat
    if only_unmet:
        binding &= (slack < 0).reshape(cap.shape)
    return np.where(binding, cap, a_hat), binding


def shortfall_weight(
    slack: npt.ArrayLike, *, kappa: float, z_range: float
) -> npt.NDArray[np.float64]:
    """``w[t] = kappa * min(1, max(0, -S[t]) / z_range)``: the unmet share of the budget
    range, scaled by ``kappa``; 0 where the segment meets its budget (``S[t] >= 0``).
    The share is capped at 1: with a tracked floor the range can be narrower than a
    shortfall.

    Args:
        slack: ``(T,)`` ``S[t]`` (:func:`segment_slack`).
        kappa: push per unit of shortfall (``efx_kappa``).
        z_range: the range a full demand spans (> 0): ``z_high - z_low``, or
            ``z_high - floor`` with a tracked floor.
    """
    if z_range <= 0:
        raise ValueError(f"z_range must be > 0, got {z_range}")
    slack = np.asarray(slack, dtype=np.float64)
    return kappa * np.minimum(1.0, np.maximum(0.0, -slack) / z_range)


def entropy_baselined_intrinsic_advantage(
    logp: npt.ArrayLike, entropy: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """Per-step intrinsic advantage of each agent in units of ``c``:
    ``(r_int - c * H) / c = -log pi(a|o) - H(pi(.|o))``.

    The baseline ``H(pi(.|o)) = E_a[-log pi(a|o)]`` is the policy's own expected
    intrinsic reward in that state (no value network), so the advantage has mean 0 under
    the policy and ``E_a[grad log pi(a|o) * A] = grad H(pi(.|o))``.

    Args:
        logp: ``(...)`` log-probabilities (densities) of the sampled actions.
        entropy: ``(...)`` entropies of the sampling policy at the same rows.
    """
    logp = np.asarray(logp, dtype=np.float64)
    entropy = np.asarray(entropy, dtype=np.float64)
    if logp.shape != entropy.shape:
        raise ValueError(f"logp has shape {logp.shape} and entropy {entropy.shape}")
    return -logp - entropy


def demand_push_term(
    slack: npt.ArrayLike,
    logp: npt.ArrayLike,
    entropy: npt.ArrayLike,
    *,
    kappa: float,
    z_range: float,
) -> npt.NDArray[np.float64]:
    """The exploration push ``w[t] * (-logp[t, ...] - H[t, ...])``, ``w`` from
    :func:`shortfall_weight`.

    Args:
        slack: ``(T,)`` ``S[t]`` of each row.
        logp, entropy: ``(T, ...)`` log-probs of the sampled actions and entropies of the
            sampling policy (``(T,)`` for one agent's rows, ``(T, n_agents)`` for a team).
        kappa, z_range: as in :func:`shortfall_weight`.

    Returns:
        The push, shaped like ``logp``; 0 on rows that meet their budget.
    """
    weight = shortfall_weight(slack, kappa=kappa, z_range=z_range)
    push = entropy_baselined_intrinsic_advantage(logp, entropy)
    if push.shape[:1] != weight.shape:
        raise ValueError(f"logp has shape {push.shape}, expected ({len(weight)}, ...)")
    return weight.reshape(weight.shape + (1,) * (push.ndim - 1)) * push


def demand_push_advantage(
    a_conservative: npt.ArrayLike,
    slack: npt.ArrayLike,
    logp: npt.ArrayLike,
    entropy: npt.ArrayLike,
    *,
    kappa: float,
    z_range: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``demand_push``: ``A[t, i] = a_conservative[t] + w[t] * (-logp[t, i] - H[t, i])``.

    Args:
        a_conservative: ``(T,)`` the conservative extrinsic advantage of each team row
            (``hinge``'s, standardized).
        slack: ``(T,)`` ``S[t]``.
        logp: ``(T, n_agents)`` log-probs of the sampled actions.
        entropy: ``(T, n_agents)`` the sampling policy's entropies.
        kappa, z_range: as in :func:`shortfall_weight`.

    Returns:
        ``(advantages (T, n_agents), w (T,))``. Where ``S[t] >= 0``, ``w[t] = 0`` and
        every agent's advantage is ``a_conservative[t]``.
    """
    a_conservative = np.asarray(a_conservative, dtype=np.float64)
    if a_conservative.ndim != 1:
        raise ValueError(f"a_conservative has shape {a_conservative.shape}, expected (T,)")
    _check_shape("slack", np.asarray(slack), a_conservative.shape)
    if np.ndim(logp) != 2:
        raise ValueError(f"logp has shape {np.shape(logp)}, expected (T, n_agents)")
    push = demand_push_term(slack, logp, entropy, kappa=kappa, z_range=z_range)
    return a_conservative[:, None] + push, shortfall_weight(slack, kappa=kappa, z_range=z_range)


EFX_ADVANTAGE_FORMS = ("seed_dp", "per_step", "hinge", "demand_push")


# The outer loop and the test-time budget choice live in ops/efx_outer_loop.py; they are
# re-exported here for callers that import everything EFX from one place.
from marllib_ext.ops.efx_outer_loop import (  # noqa: E402, F401
    BUDGET_RANGES,
    Z_OPTIMIZERS,
    Z_SAMPLING_MODES,
    BudgetController,
    largest_budget_within,
    sample_initial_budget,
)
