"""The budget's inverse temperature on an actor's distribution inputs (EFX
``budget_temperature``; the module is ``policies/budget_actor.py``)."""

from __future__ import annotations

import torch


def gated_log_beta(raw: torch.Tensor, budget: torch.Tensor) -> torch.Tensor:
    """``log beta = u * g``: the temperature network's output ``g (..., 1)`` times the
    normalized remaining budget ``u (..., 1)`` in ``[0, 1]``.

    At ``u = 0`` (no budget left, or a z = 0 deployment) ``beta = 1`` exactly: the actor
    is the plain actor there, whatever the pushes at higher budgets taught ``g``."""
    if raw.shape != budget.shape:
        raise ValueError(f"raw has shape {tuple(raw.shape)} and budget {tuple(budget.shape)}")
    return budget * raw


def scale_distribution_inputs(
    dist_inputs: torch.Tensor, log_beta: torch.Tensor, *, discrete: bool
) -> torch.Tensor:
    """Categorical logits ``l -> beta * l``; diagonal Gaussian ``[mean, log_std] ->
    [mean, log_std - log_beta]`` (beta > 1 sharpens, < 1 flattens, either way).

    ``dist_inputs (..., k)``, ``log_beta (..., 1)``."""
    if discrete:
        return dist_inputs * torch.exp(log_beta)
    mean, log_std = torch.chunk(dist_inputs, 2, dim=-1)
    return torch.cat([mean, log_std - log_beta], dim=-1)


def temperature_push_loss(
    logp_tempered: torch.Tensor,
    logp_sampled: torch.Tensor,
    push: torch.Tensor,
    *,
    clip: float,
    mean,
) -> torch.Tensor:
    """PPO's clipped surrogate of the exploration push alone, on the temperature only.

    ``L = -mean(min(r * P, clip(r, 1 - eps, 1 + eps) * P))``, ``r = exp(logp_tempered -
    logp_sampled)``, with ``logp_tempered`` the log-prob of the sampled action under the
    actor's distribution rebuilt from its *detached* plain logits scaled by the
    temperature (``beta * stopgrad(l)``): numerically the actor's own ratio, but its
    gradient reaches only the temperature network ``g``. The extrinsic advantage keeps
    training the whole actor through PPO's own loss.

    Args:
        logp_tempered, logp_sampled, push: ``(B,)`` log-probs now (temperature path)
            and at sampling, and the push ``w * (-log pi - H)`` of each row.
        clip: PPO's ``clip_param`` (eps).
        mean: the masked mean over the batch's loss rows.
    """
    ratio = torch.exp(logp_tempered - logp_sampled)
    surrogate = torch.minimum(ratio * push, torch.clamp(ratio, 1 - clip, 1 + clip) * push)
    return -mean(surrogate)
