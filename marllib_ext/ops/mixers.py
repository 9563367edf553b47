"""Value-decomposition mixing functions (torch), no Ray import.

Shapes: ``agent_values (B, n_agents)`` per-agent values ``V_i``; the mixed team value
``V_tot`` is ``(B,)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def vdn_mix(agent_values: torch.Tensor) -> torch.Tensor:
    """VDN: ``V_tot = sum_i V_i``."""
    if agent_values.dim() != 2:
        raise ValueError(f"agent_values has shape {tuple(agent_values.shape)}, expected (B, n)")
    return agent_values.sum(dim=1)


def qmix_mix(
    agent_values: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
) -> torch.Tensor:
    """QMIX's monotonic mixer with state-conditioned (hypernetwork) weights.

    ``hidden = elu(V @ |w1| + b1)``, ``V_tot = hidden @ |w2| + b2``; the absolute
    values make ``dV_tot / dV_i >= 0`` for every agent (Rashid et al., 2018).

    Args:
        agent_values: ``(B, n)``.
        w1: ``(B, n, embed)``; b1: ``(B, embed)``; w2: ``(B, embed)``; b2: ``(B,)``.

    Returns:
        ``(B,)`` mixed value.
    """
    batch, n_agents = agent_values.shape
    if w1.shape[:2] != (batch, n_agents):
        raise ValueError(
            f"w1 has shape {tuple(w1.shape)}, expected ({batch}, {n_agents}, embed) "
            f"for agent_values {tuple(agent_values.shape)}"
        )
    hidden = F.elu(qmix_hidden_preactivations(agent_values, w1, b1))
    return torch.einsum("be,be->b", hidden, w2.abs()) + b2


def qmix_hidden_preactivations(
    agent_values: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor
) -> torch.Tensor:
    """The QMIX mixer's hidden layer before its ELU: ``V @ |w1| + b1``.

    Args:
        agent_values: ``(B, n)``; w1: ``(B, n, embed)``; b1: ``(B, embed)``.

    Returns:
        ``(B, embed)``.
    """
    return torch.einsum("bn,bne->be", agent_values, w1.abs()) + b1
