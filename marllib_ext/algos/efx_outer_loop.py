"""EFXplorer's env-runner and algorithm callbacks: episode returns at the deployment
budget, and the outer loop that moves that budget (seed 000's ``z`` update)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from ray.rllib.core.columns import Columns

from marllib_ext.algos.progress import ProgressColumn, read_number
from marllib_ext.postprocessing.budget import (
    DEPLOY_KEY,
    BudgetObservationConnector,
    budget_controller,
)
from marllib_ext.postprocessing.efx_advantage import EFXJointAdvantageConnector
from marllib_ext.postprocessing.episode_sums import sum_over_env_steps
from marllib_ext.rllib_compat import connectors_of, env_to_module, settings_of

# Per-iteration sums logged by env runners at episode end.
TEAM_EXTRINSIC_RETURN_SUM = "efx_team_extrinsic_return_sum"
TEAM_INTRINSIC_RETURN_SUM = "efx_team_intrinsic_return_sum"
EPISODES_DONE = "efx_episodes_done"
# The same for the episodes played at the controller's (deployment) budget.
DEPLOY_EXTRINSIC_RETURN_SUM = "efx_deploy_extrinsic_return_sum"
DEPLOY_INTRINSIC_RETURN_SUM = "efx_deploy_intrinsic_return_sum"
DEPLOY_EPISODES_DONE = "efx_deploy_episodes_done"
# Smoothed over the last 100 episodes, for display.
TEAM_INTRINSIC_RETURN_MEAN = "efx_team_intrinsic_return_mean"
RESULT_KEY = "efx"

PROGRESS_COLUMNS = (
    ProgressColumn("budget_z", "z", ".3g"),
    ProgressColumn("deploy_return_mean", "deploy return", ".3f"),
)


def progress(result: Mapping[str, Any]) -> dict[str, float]:
    """The budget after this iteration's outer step, and the mean team return of the
    episodes played at the deployment budget (``episode_return_mean`` averages the
    whole sampled-z training mixture)."""
    return {
        "budget_z": read_number(result, RESULT_KEY, "budget_z"),
        "deploy_return_mean": read_number(result, RESULT_KEY, "team_extrinsic_return_mean"),
    }


def _chunk_team_logp(chunk) -> np.ndarray:
    """``sum_i log pi_i`` per env step of one chunk (every agent acts at every step)."""
    per_agent = [
        np.asarray(agent_episode.get_extra_model_outputs(Columns.ACTION_LOGP), np.float64)
        for agent_episode in chunk.agent_episodes.values()
        if len(agent_episode) > 0
    ]
    if not per_agent:
        return np.zeros(0)
    steps = max(len(logp) for logp in per_agent)
    total = np.zeros(steps)
    for logp in per_agent:
        total[: len(logp)] += logp
    return total


def episode_team_logp(chunks) -> float:
    """``sum_t sum_i log pi_i`` over a finished episode's chunks."""
    return sum_over_env_steps(chunks, _chunk_team_logp)


def log_episode_returns(
    *, episode, prev_episode_chunks=None, env_runner=None, metrics_logger=None, **kwargs
) -> None:
    """``on_episode_end``: the episode's team extrinsic and intrinsic returns, summed
    separately for the episodes played at the deployment budget."""
    coef = settings_of(env_runner.config).intrinsic_coef
    chunks = [*(prev_episode_chunks or []), episode]
    intrinsic = -coef * episode_team_logp(chunks)
    extrinsic = float(sum(chunk.get_return() for chunk in chunks))
    metrics_logger.log_value(TEAM_EXTRINSIC_RETURN_SUM, extrinsic, reduce="sum")
    metrics_logger.log_value(TEAM_INTRINSIC_RETURN_SUM, intrinsic, reduce="sum")
    metrics_logger.log_value(EPISODES_DONE, 1, reduce="sum")
    metrics_logger.log_value(TEAM_INTRINSIC_RETURN_MEAN, intrinsic, window=100)
    if episode.custom_data.get(DEPLOY_KEY, False):
        metrics_logger.log_value(DEPLOY_EXTRINSIC_RETURN_SUM, extrinsic, reduce="sum")
        metrics_logger.log_value(DEPLOY_INTRINSIC_RETURN_SUM, intrinsic, reduce="sum")
        metrics_logger.log_value(DEPLOY_EPISODES_DONE, 1, reduce="sum")


def budget_connector(env_runner) -> BudgetObservationConnector | None:
    """The env runner's budget connector (``None`` where it has none)."""
    found = connectors_of(env_to_module(env_runner), BudgetObservationConnector)
    return found[0] if found else None


def _get_controller_state(env_runner):
    connector = budget_connector(env_runner)
    return None if connector is None else connector.controller.get_state()


def _set_controller_state(env_runner, state):
    connector = budget_connector(env_runner)
    if connector is not None:
        connector.controller.set_state(state)


def _set_learner_budget(learner, z):
    for connector in learner.advantage_connectors(EFXJointAdvantageConnector):
        connector.budget = z


def _count(stats: dict, key: str) -> int:
    """An iteration's episode count (RLlib reports NaN for a sum nobody logged)."""
    count = stats.get(key, 0)
    return int(count) if count is not None and np.isfinite(count) else 0


def _mean(stats: dict, total_key: str, count_key: str) -> float:
    count = _count(stats, count_key)
    return stats.get(total_key, math.nan) / count if count > 0 else math.nan


def update_budget(*, algorithm, result: dict, **kwargs) -> None:
    """``on_train_result``: one outer-loop step on the deployment budget z, from this
    iteration's episodes played at that budget; broadcast to runners and learners."""
    runners = algorithm.env_runner_group
    states = [s for s in runners.foreach_env_runner(_get_controller_state) if s]
    if not states:
        return
    controller = budget_controller(settings_of(algorithm.config))
    controller.set_state(states[0])
    stats = result.get("env_runners", {})
    j_ext = _mean(stats, DEPLOY_EXTRINSIC_RETURN_SUM, DEPLOY_EPISODES_DONE)
    j_int = _mean(stats, DEPLOY_INTRINSIC_RETURN_SUM, DEPLOY_EPISODES_DONE)
    budget_played = controller.z
    slack = controller.update(j_ext, j_int) if np.isfinite(j_ext) else None
    state = controller.get_state()
    runners.foreach_env_runner(
        functools.partial(_set_controller_state, state=state), local_env_runner=True
    )
    algorithm.learner_group.foreach_learner(functools.partial(_set_learner_budget, z=state["z"]))
    result[RESULT_KEY] = {
        "budget_z": state["z"],
        "budget_z_played": budget_played,
        "slack": math.nan if slack is None else slack,
        "deploy_episodes": _count(stats, DEPLOY_EPISODES_DONE),
        # At the deployment budget (what the team delivers) ...
        "team_extrinsic_return_mean": j_ext,
        "team_intrinsic_return_mean": j_int,
        # ... and over every episode of the sampled-z training mixture.
        "mixture_extrinsic_return_mean": _mean(stats, TEAM_EXTRINSIC_RETURN_SUM, EPISODES_DONE),
        "mixture_intrinsic_return_mean": _mean(stats, TEAM_INTRINSIC_RETURN_SUM, EPISODES_DONE),
    }
