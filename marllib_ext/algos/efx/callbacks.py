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
from marllib_ext.postprocessing.budget_arrays import (
    DEPLOY_EPISODES_DONE,
    DEPLOY_EXTRINSIC_RETURN_SUM,
    DEPLOY_INTRINSIC_RETURN_SUM,
    EPISODES_DONE,
    HIGH_EPISODES_DONE,
    HIGH_INTRINSIC_RETURN_SUM,
    LOW_EPISODES_DONE,
    LOW_INTRINSIC_RETURN_SUM,
    PER_TEAM,
    TEAM_EXTRINSIC_RETURN_SUM,
    TEAM_INTRINSIC_RETURN_SUM,
)
from marllib_ext.postprocessing.budget_connector import (
    BudgetObservationConnector,
    budget_controllers,
)
from marllib_ext.postprocessing.efx_advantage import EFXJointAdvantageConnector
from marllib_ext.postprocessing.episode_sums import sum_over_env_steps
from marllib_ext.postprocessing.intrinsic_signals import INTRINSIC_REWARD
from marllib_ext.rllib_compat import connectors_of, env_to_module, settings_of
from marllib_ext.rollout.episode_blocks import after_step_column
from marllib_ext.rollout.episode_steps import per_env_step
from marllib_ext.rollout.extensions import logged_by_array_form

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


def _agent_intrinsic(chunk, agent: str, coef: float) -> np.ndarray:
    """An agent's intrinsic reward per step of one chunk: the recorded signal
    (``INTRINSIC_REWARD``), or the surprisal ``-coef * log pi``."""
    agent_episode = chunk.agent_episodes[agent]
    recorded = after_step_column(chunk, INTRINSIC_REWARD, agent, len(agent_episode))
    if recorded is not None:
        return recorded
    logp = agent_episode.get_extra_model_outputs(Columns.ACTION_LOGP)
    return -coef * np.asarray(logp, np.float64).reshape(-1)


def _chunk_team_intrinsic(chunk, coef: float, agents=None) -> np.ndarray:
    """``sum_{i in agents} r_int_i`` per env step of one chunk, over the agents that
    acted at that step (``agents=None``: every agent)."""
    return per_env_step(
        chunk,
        {
            agent_id: _agent_intrinsic(chunk, agent_id, coef)
            for agent_id, agent_episode in chunk.agent_episodes.items()
            if len(agent_episode) > 0 and (agents is None or agent_id in agents)
        },
    )


def episode_team_intrinsic(chunks, *, coef: float, agents=None) -> float:
    """The team intrinsic return ``sum_t sum_{i in agents} r_int_i`` of a finished
    episode's chunks (``coef``: ``intrinsic_coef``, for the surprisal signal)."""
    return sum_over_env_steps(
        chunks, functools.partial(_chunk_team_intrinsic, coef=coef, agents=agents)
    )


@logged_by_array_form  # BudgetArrays logs the same sums on the batched rollout
def log_episode_returns(*, episode, env_runner=None, metrics_logger=None, **kwargs) -> None:
    """``on_episode_end``: the episode's team extrinsic and intrinsic returns (every
    agent), summed separately for the episodes played at the deployment budget, where
    each team's own returns are summed too (its outer loop reads them): the sums the
    episode's budget state holds (``BudgetTracker``, as on the batched rollout)."""
    budget_connector(env_runner).log_ended(episode, metrics_logger)


def budget_connector(env_runner) -> BudgetObservationConnector | None:
    """The env runner's budget connector (``None`` where it has none)."""
    found = connectors_of(env_to_module(env_runner), BudgetObservationConnector)
    return found[0] if found else None


def play_evaluation_budget(*, algorithm, **kwargs) -> None:
    """``on_evaluate_start``: the evaluation runner plays every episode at each team's
    current deployment budget (copied from the training runner: the outer loop
    broadcasts to the training runners only), or at the fixed ``evaluation_budget``."""
    runner = getattr(algorithm, "eval_env_runner", None)
    connector = None if runner is None else budget_connector(runner)
    if connector is None:
        return
    source = budget_connector(algorithm.env_runner)
    if source is not None and source is not connector:
        connector.set_state(source.get_state())
    connector.play_fixed(settings_of(algorithm.config).evaluation_budget)


def _get_controller_states(env_runner):
    connector = budget_connector(env_runner)
    return None if connector is None else connector.get_state()


def _set_controller_states(env_runner, state):
    connector = budget_connector(env_runner)
    if connector is not None:
        connector.set_state(state)


def _set_learner_budgets(learner, budgets: dict[str, float], demand_ranges: dict[str, float]):
    for connector in learner.advantage_connectors(EFXJointAdvantageConnector):
        connector.budget = budgets[connector.team.team]
        connector.demand_range = demand_ranges[connector.team.team]


def _count(stats: dict, key: str) -> int:
    """An iteration's episode count (RLlib reports NaN for a sum nobody logged)."""
    count = stats.get(key, 0)
    return int(count) if count is not None and np.isfinite(count) else 0


def _mean(stats: dict, total_key: str, count_key: str) -> float:
    return _per_episode(stats.get(total_key, math.nan), _count(stats, count_key))


def _per_episode(total: float, count: int) -> float:
    return total / count if count > 0 else math.nan


def update_budget(*, algorithm, result: dict, **kwargs) -> None:
    """``on_train_result``: one outer-loop step on each team's deployment budget z, from
    this iteration's episodes played at the deployment budgets (the team's own
    extrinsic and intrinsic returns); broadcast to runners and learners.

    ``result["efx"]`` holds the step's values; on a mixed env the budget and the
    returns of each team are under ``result["efx"]["teams"][team]`` and the top-level
    budget entries are NaN (the returns there sum every agent)."""
    runners = algorithm.env_runner_group
    states = [s for s in runners.foreach_env_runner(_get_controller_states) if s]
    if not states:
        return
    settings = settings_of(algorithm.config)
    controllers = budget_controllers(settings)
    for team, state in states[0]["controllers"].items():
        controllers[team].set_state(state)
    stats = result.get("env_runners", {})
    deployed = _count(stats, DEPLOY_EPISODES_DONE)
    per_team = {}
    for team, controller in controllers.items():
        team_stats = stats.get(PER_TEAM, {}).get(team, {})
        j_ext = _per_episode(team_stats.get(DEPLOY_EXTRINSIC_RETURN_SUM, math.nan), deployed)
        j_int = _per_episode(team_stats.get(DEPLOY_INTRINSIC_RETURN_SUM, math.nan), deployed)
        budget_played = controller.z
        slack = controller.update(j_ext, j_int) if np.isfinite(j_ext) else None
        if settings.budget_range == "tracked":
            controller.track_floor(
                _per_episode(
                    team_stats.get(LOW_INTRINSIC_RETURN_SUM, math.nan),
                    _count(team_stats, LOW_EPISODES_DONE),
                )
            )
        per_team[team] = {
            # Team intrinsic return of the training episodes started at z_low and at
            # z_high: how far the budget input moves behaviour.
            "intrinsic_return_at_z_low": _per_episode(
                team_stats.get(LOW_INTRINSIC_RETURN_SUM, math.nan),
                _count(team_stats, LOW_EPISODES_DONE),
            ),
            "intrinsic_return_at_z_high": _per_episode(
                team_stats.get(HIGH_INTRINSIC_RETURN_SUM, math.nan),
                _count(team_stats, HIGH_EPISODES_DONE),
            ),
            "budget_z": controller.z,
            "budget_floor": controller.floor,
            "budget_z_played": budget_played,
            "slack": math.nan if slack is None else slack,
            "team_extrinsic_return_mean": j_ext,
            "team_intrinsic_return_mean": j_int,
        }
    state = {"controllers": {team: c.get_state() for team, c in controllers.items()}}
    runners.foreach_env_runner(
        functools.partial(_set_controller_states, state=state), local_env_runner=True
    )
    algorithm.learner_group.foreach_learner(
        functools.partial(
            _set_learner_budgets,
            budgets={team: c.z for team, c in controllers.items()},
            demand_ranges={team: c.demand_range for team, c in controllers.items()},
        )
    )
    single = next(iter(per_team.values())) if len(per_team) == 1 else None
    result[RESULT_KEY] = {
        **{
            key: single[key] if single else math.nan
            for key in ("intrinsic_return_at_z_low", "intrinsic_return_at_z_high")
        },
        "budget_z": single["budget_z"] if single else math.nan,
        "budget_floor": single["budget_floor"] if single else math.nan,
        "budget_z_played": single["budget_z_played"] if single else math.nan,
        "slack": single["slack"] if single else math.nan,
        "deploy_episodes": deployed,
        # At the deployment budget (what the team delivers) ...
        "team_extrinsic_return_mean": _mean(
            stats, DEPLOY_EXTRINSIC_RETURN_SUM, DEPLOY_EPISODES_DONE
        ),
        "team_intrinsic_return_mean": _mean(
            stats, DEPLOY_INTRINSIC_RETURN_SUM, DEPLOY_EPISODES_DONE
        ),
        # ... and over every episode of the sampled-z training mixture.
        "mixture_extrinsic_return_mean": _mean(stats, TEAM_EXTRINSIC_RETURN_SUM, EPISODES_DONE),
        "mixture_intrinsic_return_mean": _mean(stats, TEAM_INTRINSIC_RETURN_SUM, EPISODES_DONE),
    }
    if single is None:
        result[RESULT_KEY]["teams"] = per_team
