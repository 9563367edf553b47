"""Progress columns of every team-replay algorithm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from ray.rllib.utils.metrics import LEARNER_RESULTS

from marllib_ext.algos.progress import ProgressColumn, read_number

PROGRESS_KEY = "team_replay"  # result[PROGRESS_KEY]: exploration, buffer size, TD error

PROGRESS_COLUMNS = (
    ProgressColumn("replay_exploration", "explore", ".3f"),
    ProgressColumn("replay_buffer_episodes", "buffer", ".0f"),
    ProgressColumn("replay_td_error", "td", ".3f"),
    ProgressColumn("replay_q", "Q", ".2f"),
    ProgressColumn("replay_sampling_tv", "tv", ".3f"),
    ProgressColumn("replay_random_episodes", "random", ".0f"),
)


def progress(result: Mapping[str, Any]) -> dict[str, float]:
    """Exploration (epsilon or noise), episodes stored, mean |TD error| of the last
    update, the mean Q of the replayed batch (``Q_tot`` per team, averaged) and the
    replay's total variation from uniform sampling (0 without priorities), and the
    episodes sampled with uniformly random actions (``random_warmup_steps``)."""
    learners = result.get(LEARNER_RESULTS, {})
    q_means = [
        read_number(learners, mid, "q_mean")
        for mid, values in learners.items()
        if isinstance(values, Mapping) and "q_mean" in values
    ]
    return {
        "replay_exploration": read_number(result, PROGRESS_KEY, "exploration"),
        "replay_buffer_episodes": read_number(result, PROGRESS_KEY, "buffer_episodes"),
        "replay_td_error": read_number(result, PROGRESS_KEY, "td_error_abs"),
        "replay_q": float(np.nanmean(q_means)) if q_means else float("nan"),
        "replay_sampling_tv": read_number(result, PROGRESS_KEY, "sampling_total_variation"),
        "replay_random_episodes": read_number(result, PROGRESS_KEY, "random_action_episodes"),
    }
