"""Per-row value losses of the MAPPO paper and HARL (torch, no Ray import): squared or
Huber error, optionally clipped around the values the batch was sampled with."""

from __future__ import annotations

import torch


def huber(error: torch.Tensor, delta: float) -> torch.Tensor:
    """``0.5 e^2`` where ``|e| <= delta``, else ``delta (|e| - 0.5 delta)`` (HARL's
    ``huber_loss``; its gradient is the error clipped to ``[-delta, delta]``)."""
    absolute = error.abs()
    return torch.where(absolute <= delta, 0.5 * error**2, delta * (absolute - 0.5 * delta))


def value_loss(
    values: torch.Tensor,
    targets: torch.Tensor,
    *,
    old_values: torch.Tensor | None = None,
    clip: float | None = None,
    huber_delta: float | None = None,
) -> torch.Tensor:
    """``(N,)`` per-row loss of ``values`` against ``targets``.

    The error ``e = targets - values`` costs ``e^2`` (``huber_delta`` None) or
    ``huber(e, huber_delta)``. With ``clip``, the clipped value
    ``old + clamp(values - old, -clip, clip)`` is scored the same way and the row takes
    the larger of the two losses (PPO's pessimistic value clipping, as in the MAPPO
    paper and HARL's ``use_clipped_value_loss``). Shapes: all ``(N,)``."""

    def loss_of(predicted: torch.Tensor) -> torch.Tensor:
        error = targets - predicted
        return error**2 if huber_delta is None else huber(error, huber_delta)

    loss = loss_of(values)
    if clip is None:
        return loss
    if old_values is None:
        raise ValueError("a clipped value loss needs the values the batch was sampled with")
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return torch.maximum(loss, loss_of(clipped))
