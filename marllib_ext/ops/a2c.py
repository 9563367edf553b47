"""Advantage actor-critic's policy loss (no Ray import)."""

from __future__ import annotations

import torch


def a2c_policy_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    entropy: torch.Tensor,
    *,
    entropy_coeff: float,
) -> torch.Tensor:
    """Per-sample advantage actor-critic loss (MARLlib's IA2C / MAA2C / VDA2C actor)::

        L[n] = -log pi(a_n | o_n) * A[n] - entropy_coeff * H(pi(. | o_n))

    The advantage is a constant (no gradient flows into it). Unlike PPO there is no
    ratio and no clipping: one gradient step per batch is the policy-gradient theorem's
    estimate (at ``pi = pi_old``, PPO's clipped surrogate has the same gradient).

    Args:
        logp: ``(N,)`` log-probabilities of the taken actions under the current policy.
        advantages: ``(N,)`` advantage estimates.
        entropy: ``(N,)`` entropy of the current policy at each observation.
        entropy_coeff: weight of the entropy bonus.

    Returns:
        ``(N,)`` per-sample loss; the caller averages it over the valid rows.
    """
    if logp.shape != advantages.shape or logp.shape != entropy.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)}, advantages {tuple(advantages.shape)} and entropy "
            f"{tuple(entropy.shape)} must have the same shape"
        )
    return -logp * advantages.detach() - entropy_coeff * entropy
