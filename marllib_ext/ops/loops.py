"""Deterministic loops in played episodes (numpy, no Ray import).

A greedy policy of feed-forward agents is a function of the state on fully observed
tasks. In a deterministic env (LBF), once a state comes back, every step after it
repeats: the episode cycles until its step limit. ``first_repeat`` finds where."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np


def first_repeat(keys: Sequence[Hashable]) -> tuple[int, int] | None:
    """``keys``: one key per visited state ``s_0 .. s_T`` -> ``(t0, period)`` of the
    first state seen twice, ``keys[t0] == keys[t0 + period]`` with ``t0 + period`` the
    earliest such step; ``None`` when all states differ. Period 1: the joint action
    left the state unchanged."""
    first_seen: dict[Hashable, int] = {}
    for t, key in enumerate(keys):
        if key in first_seen:
            return first_seen[key], t - first_seen[key]
        first_seen[key] = t
    return None


def state_keys(observations: np.ndarray) -> list[bytes]:
    """``(T + 1, ...)`` joint observations (every agent's, one row per step) -> one
    hashable key per step (equal rows, equal keys)."""
    rows = np.ascontiguousarray(observations).reshape(len(observations), -1)
    return [row.tobytes() for row in rows]
