"""ROER: regularized optimal experience replay (seed 003), KL and Jensen-Shannon, pure torch.

Notation: ``delta = r + gamma * mask * V(s') - V(s)`` is the TD error of the state value
(it sets the priorities), ``diff = Q(s, a) - V(s)`` drives the value loss, ``temp`` is
the loss temperature. All functions are elementwise over a batch ``(B,)``.

KL (the original ROER / extreme-Q objective)::

    w        = clip(exp(delta / temp), min_clip, max_clip)      [/ mean(w) if normalize]
    x        = diff / temp,  z = min(x, gumbel_max_clip)
    loss     = (exp(z) - z - 1 + (x - z) * (exp(z) - 1)) / sg(mean(max(1, exp(z))))

JS (seed 003)::

    s        = sigmoid(clip(delta / temp, -max_clip, max_clip))
    w        = js_min_weight + s * (js_max_weight - js_min_weight)   [/ mean(w) if normalize]
    x        = diff / temp,  z = clip(x, -gumbel_max_clip, gumbel_max_clip)
    loss     = (softplus(z) - log 2 + (x - z) * sigmoid(z)) / sg(mean(max(0.5, sigmoid(z))))

Beyond the clip both losses continue along their tangent (``x - z`` times the slope at
``z``), so the gradient in ``x`` is continuous. (ROER's reference code divides the KL
tangent term by ``temp`` once more; here it is the plain tangent.) Stored priorities
follow an EMA, ``p <- (1 - per_beta) * p + per_beta * w``.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

LOG_2 = math.log(2.0)


def state_value_td_error(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminateds: torch.Tensor,
    discounts: torch.Tensor,
) -> torch.Tensor:
    """``delta = r + discount * (1 - terminated) * V(s') - V(s)``; all ``(B,)``
    (``discounts`` is ``gamma^n`` per sample for n-step returns)."""
    return rewards + discounts * (1.0 - terminateds.float()) * next_values - values


def squared_value_loss(diff: torch.Tensor) -> torch.Tensor:
    """``diff^2 / 2`` per sample: the plain regression of V on Q (PER and uniform)."""
    return 0.5 * diff.square()


def kl_priority(
    td_error: torch.Tensor,
    *,
    temp: float,
    min_clip: float,
    max_clip: float,
    normalize: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KL priorities ``w = clip(exp(delta/temp), min_clip, max_clip)``, optionally divided
    by their batch mean. Returns ``(priority, exp_weight)``; ``exp_weight`` is the
    clipped ``exp`` before normalization (the seed's ``per_weight`` metric)."""
    _check_temp(temp)
    if not 0 < min_clip <= max_clip:
        raise ValueError(f"need 0 < min_clip <= max_clip, got {min_clip}, {max_clip}")
    # exp of an exponent capped at log(max_clip) cannot overflow; the clip is unchanged.
    exponent = torch.clamp(td_error / temp, max=math.log(max_clip))
    weight = torch.clamp(torch.exp(exponent), min_clip, max_clip)
    priority = weight / weight.mean() if normalize else weight
    return priority, weight


def js_priority(
    td_error: torch.Tensor,
    *,
    temp: float,
    max_clip: float,
    js_min_weight: float,
    js_max_weight: float,
    normalize: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """JS priorities ``js_min + sigmoid(clip(delta/temp, +-max_clip)) * (js_max - js_min)``,
    optionally divided by their batch mean. Returns ``(priority, sigmoid_weight)``."""
    _check_temp(temp)
    if not 0 < js_min_weight <= js_max_weight:
        raise ValueError(
            f"need 0 < js_min_weight <= js_max_weight, got {js_min_weight}, {js_max_weight}"
        )
    scaled = torch.clamp(td_error / temp, -max_clip, max_clip)
    sigmoid = torch.sigmoid(scaled)
    priority = js_min_weight + sigmoid * (js_max_weight - js_min_weight)
    if normalize:
        priority = priority / priority.mean()
    return priority, sigmoid


def ema_priority(old: torch.Tensor, new: torch.Tensor, per_beta: float) -> torch.Tensor:
    """``(1 - per_beta) * old + per_beta * new``; ``per_beta=1`` replaces."""
    if not 0 < per_beta <= 1:
        raise ValueError(f"per_beta must be in (0, 1], got {per_beta}")
    return (1.0 - per_beta) * old + per_beta * new


def gumbel_value_loss(
    diff: torch.Tensor, *, temp: float, gumbel_max_clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample KL (Gumbel / extreme-Q) value loss and its stop-gradient norm."""
    _check_temp(temp)
    x = diff / temp
    z = torch.clamp(x, max=gumbel_max_clip)
    exp_z = torch.exp(z)
    loss = exp_z - z - 1.0 + (x - z) * (exp_z - 1.0)
    norm = torch.clamp(exp_z, min=1.0).mean().detach()
    return loss / norm, norm


def js_value_loss(
    diff: torch.Tensor, *, temp: float, gumbel_max_clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample JS value loss ``softplus(z) - log 2`` (tangent beyond the clip) and its
    stop-gradient norm ``mean(max(0.5, sigmoid(z)))``."""
    _check_temp(temp)
    x = diff / temp
    z = torch.clamp(x, -gumbel_max_clip, gumbel_max_clip)
    sigmoid_z = torch.sigmoid(z)
    loss = F.softplus(z) - LOG_2 + (x - z) * sigmoid_z
    norm = torch.clamp(sigmoid_z, min=0.5).mean().detach()
    return loss / norm, norm


def per_priority(td_error: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Classic PER priority ``|delta| + eps`` (the buffer applies its own alpha)."""
    return td_error.abs() + eps


def _check_temp(temp: float) -> None:
    if temp <= 0:
        raise ValueError(f"temp must be > 0, got {temp}")
