"""Safe-MARL env-runner and algorithm callbacks: episode costs and the multiplier step."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from marllib_ext.algos.progress import ProgressColumn, read_number
from marllib_ext.algos.safe.learner import COST_MULTIPLIER
from marllib_ext.envs.adapter import TEAM_COST_KEY
from marllib_ext.postprocessing.episode_sums import sum_over_env_steps
from marllib_ext.rllib_compat import settings_of

RESULT_KEY = "safe"
# Per-iteration sums logged by env runners at episode end.
EPISODE_COST_SUM = "safe_episode_cost_sum"
COST_EPISODES_DONE = "safe_episodes_done"
# Smoothed over the last 100 episodes, for display.
EPISODE_COST_MEAN = "episode_cost_mean"

PROGRESS_COLUMNS = (
    ProgressColumn("episode_cost_mean", "cost", ".3f"),
    ProgressColumn("cost_multiplier", "lambda", ".3f"),
)


def progress(result: Mapping[str, Any]) -> dict[str, float]:
    """The iteration's mean team episode cost and the multiplier after its step."""
    return {
        "episode_cost_mean": read_number(result, RESULT_KEY, "episode_cost_mean"),
        "cost_multiplier": read_number(result, RESULT_KEY, COST_MULTIPLIER),
    }


def _chunk_team_costs(chunk) -> list[float]:
    # Info k + 1 arrives with the observation after step k; team_cost is the same in
    # every agent's info.
    agent_episode = next(iter(chunk.agent_episodes.values()))
    return [float(info.get(TEAM_COST_KEY, 0.0)) for info in agent_episode.get_infos()[1:]]


def episode_team_cost(chunks) -> float:
    """Team cost of an episode (sum over agents and env steps) from its chunks."""
    return sum_over_env_steps(chunks, _chunk_team_costs)


def log_episode_cost(*, episode, prev_episode_chunks=None, metrics_logger=None, **kwargs) -> None:
    """``on_episode_end``: the episode's team cost (sum over agents and steps)."""
    cost = episode_team_cost([*(prev_episode_chunks or []), episode])
    metrics_logger.log_value(EPISODE_COST_SUM, cost, reduce="sum")
    metrics_logger.log_value(COST_EPISODES_DONE, 1, reduce="sum")
    metrics_logger.log_value(EPISODE_COST_MEAN, cost, window=100)


def update_cost_multiplier(*, algorithm, result: dict, **kwargs) -> None:
    """``on_train_result``: one multiplier step from this iteration's mean episode cost."""
    cost_limit = settings_of(algorithm.config).cost_limit
    stats = result.get("env_runners", {})
    episodes = stats.get(COST_EPISODES_DONE, 0) or 0
    mean_cost = math.nan
    if episodes > 0:
        mean_cost = stats[EPISODE_COST_SUM] / episodes
        values = algorithm.learner_group.foreach_learner(
            lambda learner: learner.update_cost_multiplier(mean_cost)
        )
    else:
        values = algorithm.learner_group.foreach_learner(
            lambda learner: learner.multiplier.multiplier
        )
    result[RESULT_KEY] = {
        "episode_cost_mean": mean_cost,
        COST_MULTIPLIER: float(next(iter(values)).get()),
        "cost_limit": cost_limit,
        "cost_limit_violation": max(0.0, mean_cost - cost_limit) if episodes > 0 else math.nan,
    }
