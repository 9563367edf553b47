"""The advantage forms that keep per-step ``A_ext`` (``per_step``, ``hinge``,
``demand_push``) and the shortfall weight they share."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from marllib_ext.ops.advantages import _check_shape


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


PUSH_SCALES = ("raw", "unit")
_UNIT_SCALE_FLOOR = 1e-8  # below this RMS the signal carries no direction: left at 0


def unit_scale(centered: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``x / sqrt(mean(x^2))`` over all entries: a centered signal brought to the unit
    scale of a standardized advantage; all zeros where its RMS is below 1e-8.

    Args:
        centered: ``(T, ...)`` a signal with mean 0 under the policy (the push before
            its weight).
    """
    x = np.asarray(centered, dtype=np.float64)
    rms = float(np.sqrt(np.mean(x * x))) if x.size else 0.0
    return x / rms if rms > _UNIT_SCALE_FLOOR else np.zeros_like(x)


def demand_push_term(
    slack: npt.ArrayLike,
    logp: npt.ArrayLike,
    entropy: npt.ArrayLike,
    *,
    kappa: float,
    z_range: float,
    scale: str = "raw",
) -> npt.NDArray[np.float64]:
    """The exploration push ``w[t] * u[t, ...]``, ``w`` from :func:`shortfall_weight` and
    ``u = -logp - H``.

    ``scale="unit"`` divides ``u`` by its RMS over the given rows (:func:`unit_scale`),
    so that at ``w = 1`` the push has the scale of a standardized advantage whatever the
    size of the signal: a near-uniform policy's surprisal varies by a few hundredths
    around its entropy, and a decayed novelty bonus by less.

    Args:
        slack: ``(T,)`` ``S[t]`` of each row.
        logp, entropy: ``(T, ...)`` log-probs of the sampled actions and entropies of the
            sampling policy (``(T,)`` for one agent's rows, ``(T, n_agents)`` for a team).
        kappa, z_range: as in :func:`shortfall_weight`.
        scale: ``raw`` or ``unit`` (:data:`PUSH_SCALES`).

    Returns:
        The push, shaped like ``logp``; 0 on rows that meet their budget.
    """
    if scale not in PUSH_SCALES:
        raise ValueError(f"scale must be one of {PUSH_SCALES}, got {scale!r}")
    weight = shortfall_weight(slack, kappa=kappa, z_range=z_range)
    push = entropy_baselined_intrinsic_advantage(logp, entropy)
    if scale == "unit":
        push = unit_scale(push)
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


EFX_ADVANTAGE_FORMS = ("seed_dp", "per_step", "hinge", "demand_push", "extrinsic_push")
# The forms that add the shortfall-weighted push to each agent's advantage:
# demand_push on hinge's capped advantage, extrinsic_push on Â_ext uncapped.
PUSH_FORMS = ("demand_push", "extrinsic_push")
