"""Checkpoints with and without an algorithm's replay store, on RLlib's ``Checkpointable``
components (``get_state(components=..., not_components=...)``, one directory per
component in ``save_to_path``, a missing directory skipped by ``restore_from_path``).

A run's final checkpoint keeps the store, so training resumes where it stopped. A policy
snapshot (the best evaluation's checkpoint, a video's) and a restore that only plays
episodes (``evaluate``, the best policy's re-evaluation at the end of ``fit``) do not
need it. On SMAX ``3s5z`` pymarl2's 5000-episode store is about 4 GB; restoring it into
an algorithm that still held its own took three copies at once (the trained store, the
unpickled one, and the store rebuilt from it) and ended a run for memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class ReplayInCheckpoints:
    """Mixin of algorithms that hold a replay store: inside ``without_replay()`` their
    ``get_state`` leaves the store out and their ``set_state`` ignores a stored one."""

    replay_in_checkpoints = True

    @contextlib.contextmanager
    def without_replay(self) -> Iterator[None]:
        self.replay_in_checkpoints = False
        try:
            yield
        finally:
            self.replay_in_checkpoints = True


def without_replay(algorithm: Any) -> contextlib.AbstractContextManager:
    """``algorithm.without_replay()`` for algorithms with a replay store, else a context
    that changes nothing."""
    if isinstance(algorithm, ReplayInCheckpoints):
        return algorithm.without_replay()
    return contextlib.nullcontext()


def save_policy_snapshot(algorithm: Any, path: Path) -> None:
    """A checkpoint of ``algorithm`` without its replay store: it plays and evaluates like
    the full one, and ``fit(resume_from=...)`` from it starts with an empty store."""
    with without_replay(algorithm):
        algorithm.save_to_path(str(Path(path).resolve()))
