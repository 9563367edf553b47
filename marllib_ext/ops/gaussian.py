"""HARL's bounded Gaussian std, torch, no Ray import.

For the free parameter ``p`` of each action dimension::

    std = bound * sigmoid(p)                        in (0, bound)
    log std = log(bound) - softplus(-p)             (stable for any p)
    p = logit(std / bound) = log(std / (bound - std))   (the start for a given std)

RLlib's free log std is ``std = exp(p)``, unbounded.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def bounded_log_std(raw: torch.Tensor, bound: float) -> torch.Tensor:
    """``log(bound * sigmoid(raw)) = log(bound) - softplus(-raw)``, elementwise; the std
    it gives lies in ``(0, bound)``. Shapes: any, unchanged."""
    return math.log(bound) - nn.functional.softplus(-raw)


def raw_for_std(std: float, bound: float) -> float:
    """The ``p`` with ``bound * sigmoid(p) = std`` (``logit(std / bound)``); needs
    ``0 < std < bound``."""
    if not 0 < std < bound:
        raise ValueError(f"initial_std must be in (0, std_bound={bound}), got {std}")
    return math.log(std / (bound - std))
