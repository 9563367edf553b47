"""The budget's inverse temperature on an actor's distribution inputs (EFX
``budget_temperature``; the module is ``policies/budget_actor.py``)."""

from __future__ import annotations

import torch


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
