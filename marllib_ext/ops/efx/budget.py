"""EFX's budget: the intrinsic reward, the team budget z and its path, the slack
``S``, and the bound ``Z_max`` that sets the budget's scale (seed 000)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

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


def budget_step(z, delta, *, z_low: float, z_high: float):
    """One budget update ``clip(z - delta, z_low, z_high)`` (used step by step while
    sampling): scalars, or ``(B,)`` arrays of every world's budget and team intrinsic
    reward at once."""
    if np.ndim(z) == 0 and np.ndim(delta) == 0:
        return min(max(z - delta, z_low), z_high)
    return np.clip(np.asarray(z, np.float64) - delta, z_low, z_high)


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


def budget_capped_intrinsic(delta: npt.ArrayLike, z: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``b[t] = min(delta[t], max(z[t], 0))``: the team intrinsic reward of step ``t``
    counted only up to the budget the team still had to collect when it acted.

    With ``z[t+1] = clip(z[t] - delta[t], z_low, z_high)``, ``z_low <= 0`` and
    ``delta >= 0``, an episode's bonuses sum to ``min(sum_t delta[t], z[0])``: the team
    is paid for exploring up to its budget and no further, and at ``z = 0`` not at all.
    A negative ``delta`` (a continuous policy's density above 1) passes through, as it
    raises the budget by as much. Elementwise, any shape.

    Args:
        delta: ``(...)`` team intrinsic rewards.
        z: ``(...)`` the budget the team saw at the same steps (before ``delta`` was
            subtracted).
    """
    delta = np.asarray(delta, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64)
    if delta.shape != z.shape:
        raise ValueError(f"delta has shape {delta.shape} and z {z.shape}")
    return np.minimum(delta, np.maximum(z, 0.0))
