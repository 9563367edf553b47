"""Safe-MARL env-runner and algorithm callbacks: episode costs and the multiplier step."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from marllib_ext.algos.progress import ProgressColumn, read_number
from marllib_ext.algos.safe.learner import COST_MULTIPLIER
from marllib_ext.ops.rollout import team_step_costs
from marllib_ext.rllib_compat import settings_of
from marllib_ext.rollout.episode_blocks import blocks_of_chunks
from marllib_ext.rollout.extensions import with_episode_end_array_form

RESULT_KEY = "safe"
# Per-iteration sums logged by env runners at episode end.
EPISODE_COST_SUM = "safe_episode_cost_sum"
COST_EPISODES_DONE = "safe_episodes_done"
# Smoothed over the last 100 episodes, for display.
EPISODE_COST_MEAN = "episode_cost_mean"
COST_MEAN_WINDOW = 100
# Per-team sums, under env_runners/<PER_TEAM>/<team>/.
PER_TEAM = "safe_per_team"

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


def episode_team_cost(chunks, agents=None) -> float:
    """Team cost of an episode from its chunks: ``ops.rollout.team_step_costs`` of the
    chunks read as blocks (``blocks_of_chunks``), summed over steps; ``agents``: the
    team's agents (default: the one team of a cooperative env)."""
    total = 0.0
    for block in blocks_of_chunks(chunks):
        if block.team_costs is None:  # the env reports none
            continue
        members = [i for i, a in enumerate(block.agents) if agents is None or a in agents]
        total += float(team_step_costs(block.team_costs, block.observed_after(), members).sum())
    return total


def _teams(settings) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    # Any algorithm may log costs with this callback; only safe settings carry teams.
    return getattr(settings, "teams", ()) or (("team", None),)


def _log_team_costs(metrics_logger, costs: dict[str, np.ndarray]) -> None:
    """The cost sums of ``n`` ended episodes, ``costs``: team -> ``(n,)`` each episode's
    team cost (both layouts log them here)."""
    total = np.sum(list(costs.values()), axis=0)
    for team, cost in costs.items():
        metrics_logger.log_value(
            (PER_TEAM, team, EPISODE_COST_SUM), float(cost.sum()), reduce="sum"
        )
    metrics_logger.log_value(EPISODE_COST_SUM, float(total.sum()), reduce="sum")
    metrics_logger.log_value(COST_EPISODES_DONE, len(total), reduce="sum")
    for value in total[-COST_MEAN_WINDOW:].tolist():
        metrics_logger.log_value(EPISODE_COST_MEAN, value, window=COST_MEAN_WINDOW)


def _log_ended_episode_costs(*, episodes, env_runner, metrics_logger, **kwargs) -> None:
    """:func:`log_episode_cost` on a rollout block's ended episodes (each agent's column
    holds its team's episode cost)."""
    team_costs = episodes.team_costs
    if team_costs is None:  # the env reports none: as the chunks' missing infos
        team_costs = np.zeros_like(episodes.returns)
    costs = {}
    for team, agents in _teams(settings_of(env_runner.config)):
        first = next(i for i, a in enumerate(episodes.agents) if agents is None or a in agents)
        costs[team] = team_costs[:, first]
    _log_team_costs(metrics_logger, costs)


@with_episode_end_array_form(_log_ended_episode_costs)
def log_episode_cost(
    *, episode, prev_episode_chunks=None, env_runner=None, metrics_logger=None, **kwargs
) -> None:
    """``on_episode_end``: each team's episode cost (sum over its agents and steps), and
    their sum over teams."""
    chunks = [*(prev_episode_chunks or []), episode]
    teams = _teams(settings_of(env_runner.config))
    _log_team_costs(
        metrics_logger,
        {team: np.array([episode_team_cost(chunks, agents)]) for team, agents in teams},
    )


def update_cost_multiplier(*, algorithm, result: dict, **kwargs) -> None:
    """``on_train_result``: one step of each team's multiplier from this iteration's
    mean episode cost of that team.

    ``result["safe"]`` holds the values; on a mixed env each team's are under
    ``result["safe"]["teams"][team]``, the top-level cost sums every team's and the
    top-level multiplier is NaN."""
    settings = settings_of(algorithm.config)
    cost_limit = settings.cost_limit
    stats = result.get("env_runners", {})
    episodes = stats.get(COST_EPISODES_DONE, 0) or 0
    team_names = [team for team, _ in _teams(settings)]
    mean_costs = {
        team: stats.get(PER_TEAM, {}).get(team, {}).get(EPISODE_COST_SUM, math.nan) / episodes
        if episodes > 0
        else math.nan
        for team in team_names
    }
    multipliers = next(
        iter(
            algorithm.learner_group.foreach_learner(
                lambda learner: learner.update_cost_multipliers(mean_costs)
            )
        )
    ).get()
    per_team = {
        team: {
            "episode_cost_mean": mean_costs[team],
            COST_MULTIPLIER: float(multipliers[team]),
            "cost_limit": cost_limit,
            "cost_limit_violation": max(0.0, mean_costs[team] - cost_limit)
            if math.isfinite(mean_costs[team])
            else math.nan,
        }
        for team in team_names
    }
    if len(per_team) == 1:
        result[RESULT_KEY] = next(iter(per_team.values()))
        return
    total = stats[EPISODE_COST_SUM] / episodes if episodes > 0 else math.nan
    result[RESULT_KEY] = {
        "episode_cost_mean": total,
        COST_MULTIPLIER: math.nan,
        "cost_limit": cost_limit,
        "teams": per_team,
    }
