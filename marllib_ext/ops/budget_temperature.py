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
