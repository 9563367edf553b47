"""A sum tree over ``capacity`` non-negative weights, vectorized over many updates and
draws (numpy, no Ray): prioritized replay draws index ``i`` with probability
``w_i / sum_j w_j`` in ``O(log capacity)`` per draw.

Layout: ``P`` = capacity rounded up to a power of two, ``tree`` of ``2P`` float64;
leaf ``i`` at ``tree[P + i]``, node ``k`` holds ``tree[2k] + tree[2k + 1]``, the
total at ``tree[1]``. RLlib's ``SumSegmentTree`` is the same structure updated and
queried one index at a time in Python; here a batch of ``n`` updates or draws costs
``log2 P`` numpy operations over ``n`` entries."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


class SumTree:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.leaves = 1 << max(0, (self.capacity - 1).bit_length())  # P
        self.tree = np.zeros(2 * self.leaves, np.float64)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, indices: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self.tree[self.leaves + np.asarray(indices, np.int64)]

    def set(self, indices: npt.ArrayLike, weights: npt.ArrayLike) -> None:
        """``w[indices] = weights``; for an index given twice the last weight wins."""
        indices = np.asarray(indices, np.int64).reshape(-1)
        weights = np.broadcast_to(np.asarray(weights, np.float64), indices.shape)
        if indices.size == 0:
            return
        if indices.min() < 0 or indices.max() >= self.capacity:
            raise IndexError(f"sum tree indices must be in [0, {self.capacity})")
        if not np.all(np.isfinite(weights)) or weights.min() < 0:
            raise ValueError("sum tree weights must be finite and >= 0")
        # numpy fancy assignment keeps the last of repeated indices.
        self.tree[self.leaves + indices] = weights
        nodes = np.unique((self.leaves + indices) // 2)
        while nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def find(self, mass: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """For each ``m`` in ``[0, total)``: the smallest ``i`` with
        ``w_0 + ... + w_i > m``, which is ``i`` with probability ``w_i / total`` when
        ``m`` is uniform."""
        mass = np.array(mass, np.float64, copy=True).reshape(-1)
        nodes = np.ones(mass.shape, np.int64)
        for _ in range(self.leaves.bit_length() - 1):  # log2 P levels down to the leaves
            left = self.tree[2 * nodes]
            right = mass >= left
            mass -= left * right
            nodes = 2 * nodes + right
        found = nodes - self.leaves
        # Rounding can push a draw past the last positive leaf: step back onto it.
        bad = (found >= self.capacity) | (self.tree[nodes] <= 0)
        if np.any(bad):
            positive = np.flatnonzero(self.tree[self.leaves : self.leaves + self.capacity] > 0)
            before = np.searchsorted(positive, found[bad], side="right") - 1
            found[bad] = positive[np.maximum(before, 0)]
        return found

    def sample(self, size: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """``size`` independent draws, index ``i`` with probability ``w_i / total``."""
        if self.total <= 0:
            raise ValueError("cannot sample from a sum tree whose weights are all 0")
        return self.find(rng.random(size) * self.total)
