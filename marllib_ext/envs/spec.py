"""What the registry holds per env: ``EnvSpec`` (how to build it, its teams, limits and
hyperparameter source) and MARLlib's ``PolicyMappingInfo``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pettingzoo.utils.env import ParallelEnv

from marllib_ext.errors import ConfigError


@dataclass(frozen=True)
class PolicyMappingInfo:
    """MARLlib's per-scenario policy-mapping dictionary."""

    team_prefix: tuple[str, ...]
    all_agents_one_policy: bool
    one_agent_one_policy: bool
    description: str = ""


@dataclass(frozen=True)
class EnvSpec:
    """Everything needed to build one registered multi-agent env."""

    name: str
    creator: Callable[..., ParallelEnv]
    policy_mapping: PolicyMappingInfo
    env_args: Mapping[str, Any] = field(default_factory=dict)
    hyperparam_source: str = "common"
    state_source: str = "auto"
    # Declared range [R_min, R_max] of the team's episode return (EFX budget bounds).
    reward_range: tuple[float, float] | None = None
    # T_max: an int, or the name of the env argument that holds it (e.g. "max_cycles").
    max_episode_steps: int | str | None = None
    # Team name -> agent-id prefixes of its agents; None: each team_prefix group is a
    # team (one team when the env declares no prefixes).
    teams: Mapping[str, tuple[str, ...]] | None = None
    # Agents move in turns (an AEC env): an agent's action completes only at its next
    # turn, which a mid-episode sampler cut would put in another chunk, so runs on it
    # sample complete episodes.
    turn_based: bool = False
    # ``batched_creator(num_envs, **env_args)``: one simulator stepping ``num_envs``
    # worlds at once (``envs.batched.BatchedWorld``), used for the env runners' vector
    # env; ``creator`` still builds the single env (evaluation, spaces).
    batched_creator: Callable[..., Any] | None = None

    def team_of(self, agents) -> dict[str, str]:
        """Agent id -> team name; every agent must belong to exactly one team."""
        declared = self.teams or {
            prefix.rstrip("_") or "team": (prefix,) for prefix in self.policy_mapping.team_prefix
        }
        teams = {}
        for agent in agents:
            matches = [
                team
                for team, prefixes in declared.items()
                if any(agent.startswith(prefix) for prefix in prefixes)
            ]
            if len(matches) != 1:
                raise ConfigError(
                    f"env {self.name!r}: agent {agent!r} belongs to "
                    f"{'no team' if not matches else f'several teams {matches}'} of "
                    f"{dict(declared)}; declare teams (team name -> agent-id prefixes)"
                )
            teams[agent] = matches[0]
        return teams

    def episode_limit(self, env_args: Mapping[str, Any] | None = None) -> int | None:
        """The declared maximum episode length for these env arguments (None: undeclared)."""
        limit = self.max_episode_steps
        if isinstance(limit, str):
            kwargs = {**self.env_args, **(env_args or {})}
            if limit not in kwargs:
                raise ConfigError(
                    f"env {self.name!r} declares max_episode_steps as env argument "
                    f"{limit!r}, which is not set"
                )
            limit = kwargs[limit]
        if limit is None:
            return None
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(
                f"env {self.name!r}: max_episode_steps must be an int >= 1, got {limit!r}"
            )
        return limit

    def make_batched(self, num_envs: int, **env_args: Any) -> Any:
        """The ``BatchedWorld`` of ``num_envs`` worlds with these env arguments."""
        return self._build(functools.partial(self.batched_creator, num_envs), env_args)

    def make(self, **env_args: Any) -> ParallelEnv:
        """Builds the PettingZoo ParallelEnv with the defaults updated by ``env_args``."""
        return self._build(self.creator, env_args)

    def _build(self, factory: Callable[..., Any], env_args: Mapping[str, Any]) -> Any:
        kwargs = {**self.env_args, **env_args}
        try:
            return factory(**kwargs)
        except TypeError as e:
            raise ConfigError(f"env {self.name!r} rejected env_args {kwargs}: {e}") from e
