"""Per-episode sums over the chunks of a finished multi-agent episode (env runner side)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def sum_over_env_steps(chunks: Sequence, values_of_chunk: Callable[[object], np.ndarray]) -> float:
    """``sum_t v[t]`` over the episode's env steps, ``v`` gathered chunk by chunk.

    ``values_of_chunk(chunk)[k]`` is the value of env step ``chunk.env_t_started + k``.
    Steps are keyed by that global index and a later chunk overwrites an earlier one:
    with a local env runner, RLlib's learner connector (``AddOneTsToEpisodesAndTruncate``)
    appends an artificial step to the very chunk objects that later arrive here as
    ``prev_episode_chunks``, and that extra entry is the next chunk's first step.
    """
    by_step: dict[int, float] = {}
    for chunk in chunks:
        start = int(chunk.env_t_started)
        for k, value in enumerate(np.asarray(values_of_chunk(chunk), dtype=np.float64)):
            by_step[start + k] = float(value)
    return float(sum(by_step.values()))
