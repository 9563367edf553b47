"""Run a trained team from a checkpoint without training, optionally at a chosen budget z."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from marllib_ext.envs.handle import EnvHandle
from marllib_ext.envs.registry import list_envs
from marllib_ext.errors import ConfigError


@dataclass(frozen=True)
class EvaluationResult:
    """Returns of ``episodes`` complete episodes."""

    team_returns: list[float]
    agent_returns: dict[str, list[float]]
    budget_z: float | None

    @property
    def team_return_mean(self) -> float:
        return float(np.mean(self.team_returns))

    @property
    def agent_return_mean(self) -> float:
        return float(np.mean([np.mean(v) for v in self.agent_returns.values()]))


def _budget_range(env_runner):
    from marllib_ext.algos.efx import budget_connector

    connector = budget_connector(env_runner)
    return None if connector is None else (connector.controller.z_low, connector.controller.z_high)


def _set_fixed_budget(env_runner, z):
    from marllib_ext.algos.efx import budget_connector

    connector = budget_connector(env_runner)
    if connector is not None:
        connector.controller.z = float(z)
        connector.z_sampling = "fixed"


def _current_budget(env_runner):
    from marllib_ext.algos.efx import budget_connector

    connector = budget_connector(env_runner)
    return None if connector is None else connector.controller.z


def _run_episodes(env_runner, num_episodes, explore):
    episodes = env_runner.sample(num_episodes=num_episodes, explore=explore, force_reset=True)
    team, agents = [], {}
    for episode in episodes:
        if hasattr(episode, "agent_episodes"):
            team.append(float(episode.get_return()))
            for agent_id, agent_episode in episode.agent_episodes.items():
                agents.setdefault(agent_id, []).append(float(agent_episode.get_return()))
        else:
            team.append(float(episode.get_return()))
            agents.setdefault("agent", []).append(team[-1])
    return team, agents


def evaluate(
    checkpoint: str | Path,
    *,
    episodes: int = 10,
    z: float | None = None,
    explore: bool = True,
) -> EvaluationResult:
    """Loads ``checkpoint`` and runs ``episodes`` episodes without training.

    ``z``: for EFX algorithms, every episode starts at this fixed budget (within the
    trained ``[z_low, z_high]``). ``explore=True`` samples actions as in training, which
    also makes z evolve as in training (RLlib logs ``logp = 0`` when not exploring).
    """
    from ray.rllib.algorithms.algorithm import Algorithm

    path = Path(checkpoint)
    if not path.exists():
        raise ConfigError(f"checkpoint {str(path)!r} does not exist")
    if episodes < 1:
        raise ConfigError(f"episodes must be >= 1, got {episodes}")
    for name in list_envs():  # the checkpoint names its env by our registry id
        EnvHandle(name).register_with_rllib()
    algorithm = Algorithm.from_checkpoint(str(path.resolve()))
    try:
        group = algorithm.env_runner_group
        use_local = group.num_remote_env_runners() == 0
        if z is not None:
            ranges = [r for r in group.foreach_env_runner(_budget_range) if r is not None]
            if not ranges:
                raise ConfigError("--z needs a checkpoint of an EFX algorithm (efx_mappo)")
            low, high = ranges[0]
            if not low <= z <= high:
                raise ConfigError(f"--z {z} is outside the trained budget range [{low}, {high}]")
            group.foreach_env_runner(
                functools.partial(_set_fixed_budget, z=float(z)), local_env_runner=True
            )
        budgets = [b for b in group.foreach_env_runner(_current_budget) if b is not None]
        outputs = group.foreach_env_runner(
            functools.partial(_run_episodes, num_episodes=episodes, explore=explore),
            local_env_runner=use_local,
            remote_worker_ids=None if use_local else [1],
        )
    finally:
        algorithm.stop()
    team, agents = outputs[0]
    return EvaluationResult(team[:episodes], agents, budgets[0] if budgets else None)
