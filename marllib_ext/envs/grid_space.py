"""``GridBox``: a flat observation vector that is a flattened ``(H, W, C)`` grid.

Every network and batch of the package reads flat vectors; an env whose observations
are feature grids (Overcooked) hands them out flattened in C order and says so with
this space, so that an image encoder (``encoder: cnn``) can put the grid back."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np


class GridBox(gym.spaces.Box):
    """A ``float32`` Box of shape ``(H * W * C,)`` holding an ``(H, W, C)`` grid
    flattened in C order (``np.ravel``); ``grid_shape`` is ``(H, W, C)``."""

    def __init__(self, grid_shape: Sequence[int], low: float = -np.inf, high: float = np.inf):
        self.grid_shape = tuple(int(d) for d in grid_shape)
        if len(self.grid_shape) != 3 or min(self.grid_shape) < 1:
            raise ValueError(f"a grid shape is (H, W, C) of positive sizes, got {grid_shape}")
        super().__init__(low, high, (int(np.prod(self.grid_shape)),), np.float32)

    def __repr__(self) -> str:
        return f"GridBox({self.grid_shape})"


def grid_shape_of(space: gym.Space) -> tuple[int, int, int] | None:
    """The ``(H, W, C)`` of a ``GridBox`` (``None`` for any other space)."""
    return getattr(space, "grid_shape", None) if isinstance(space, gym.spaces.Box) else None
