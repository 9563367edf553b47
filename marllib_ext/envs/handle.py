"""``make_env``: a MARLlib-style handle on a registered env plus its arguments."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from marllib_ext.envs.adapter import (
    STATE_SOURCES,
    ParallelEnvAdapter,
    has_action_mask,
    plain_observation_space,
)
from marllib_ext.envs.agent_inputs import (
    AGENT_ID_ARG,
    LAST_ACTION_ARG,
    AgentInputs,
    AgentInputsWorld,
)
from marllib_ext.envs.batched import BatchedVectorEnv
from marllib_ext.envs.registry import EnvSpec, get_env_spec, is_gymnasium_id
from marllib_ext.envs.time_feature import TIME_FEATURE_ARG, TimeLeftObservation
from marllib_ext.errors import ConfigError

STATE_SOURCE_ARG = "state_source"  # env argument: the joint critics' state (adapter)

RLLIB_ENV_PREFIX = "marllib_ext/"


@dataclass(frozen=True)
class EnvLayout:
    """What an algorithm needs to know about an env before building modules."""

    agents: tuple[str, ...]
    observation_spaces: dict[str, gym.Space]
    action_spaces: dict[str, gym.Space]
    state_space: gym.spaces.Box | None
    # agent -> team (one team on cooperative envs and single-agent ones)
    team_of: dict[str, str] = field(default_factory=dict)

    @property
    def has_action_masks(self) -> bool:
        return any(has_action_mask(space) for space in self.observation_spaces.values())

    def plain_observation_space(self, agent: str) -> gym.Space:
        """``agent``'s observation space without its action mask."""
        return plain_observation_space(self.observation_spaces[agent])

    @property
    def teams(self) -> dict[str, tuple[str, ...]]:
        """Team name -> its agents (sorted), teams in sorted order."""
        return {
            team: tuple(a for a in self.agents if self.team_of.get(a, "team") == team)
            for team in sorted(set(self.team_of.values()) or {"team"})
        }


def _flag(config: dict[str, Any], name: str) -> bool:
    """Pops the boolean env argument ``name`` from ``config`` (checked; default false)."""
    value = config.pop(name, False)
    if not isinstance(value, bool):
        raise ConfigError(f"env argument {name} must be true or false, got {value!r}")
    return value


def _time_feature(config: dict[str, Any]) -> bool:
    """Pops the ``time_feature`` env argument from ``config`` (checked)."""
    return _flag(config, TIME_FEATURE_ARG)


def _agent_inputs(config: dict[str, Any]):
    """``env -> env`` with the agent's id and last action in its observations where the
    env arguments ask for them (popped from ``config``)."""
    agent_id, last_action = _flag(config, AGENT_ID_ARG), _flag(config, LAST_ACTION_ARG)
    if not (agent_id or last_action):
        return lambda env: env
    return lambda env: AgentInputs(env, agent_id=agent_id, last_action=last_action)


def _agent_inputs_world(config: dict[str, Any]):
    """``world -> world``: a batched simulator's array calls with the inputs
    ``_agent_inputs`` adds (read from ``config`` before ``_agent_inputs`` pops them)."""
    agent_id = bool(config.get(AGENT_ID_ARG, False))
    last_action = bool(config.get(LAST_ACTION_ARG, False))
    if not (agent_id or last_action):
        return lambda world: world
    return lambda world: AgentInputsWorld(world, agent_id=agent_id, last_action=last_action)


def _state_source(config: dict[str, Any], spec: EnvSpec) -> str:
    """Pops the ``state_source`` env argument from ``config`` (checked); the env's own
    (``EnvSpec.state_source``) without it."""
    source = config.pop(STATE_SOURCE_ARG, spec.state_source)
    if source not in STATE_SOURCES:
        raise ConfigError(
            f"env argument {STATE_SOURCE_ARG} must be one of {STATE_SOURCES}, got {source!r}"
        )
    return source


def _adapt(
    env, config: dict[str, Any], with_time: bool, state_source: str, spec: EnvSpec
) -> ParallelEnvAdapter:
    if with_time:
        limit = spec.episode_limit(config)
        if limit is None:
            raise ConfigError(
                f"env {spec.name!r} declares no episode limit; {TIME_FEATURE_ARG}=true needs one"
            )
        env = TimeLeftObservation(env, limit)
    return ParallelEnvAdapter(
        env,
        state_source=state_source,
        env_name=spec.name,
        team_of=spec.team_of(env.possible_agents),
    )


def _make_rllib_env(config: dict[str, Any], *, spec: EnvSpec) -> ParallelEnvAdapter:
    config = dict(config)
    with_time = _time_feature(config)
    state_source = _state_source(config, spec)
    inputs = _agent_inputs(config)
    return _adapt(inputs(spec.make(**config)), config, with_time, state_source, spec)


class RllibEnvCreator:
    """What is registered with Ray's env registry for one env: ``creator(config)``
    builds its single RLlib env; ``make_batched`` builds the vector env of an env with
    a batched simulator (``envs.batched.BatchedEnvRunner`` calls it)."""

    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec

    def __call__(self, config: dict[str, Any]) -> ParallelEnvAdapter:
        return _make_rllib_env(config, spec=self.spec)

    def make_batched(self, num_envs: int, config: dict[str, Any]) -> BatchedVectorEnv:
        config = dict(config)
        with_time = _time_feature(config)
        state_source = _state_source(config, self.spec)
        world_inputs = _agent_inputs_world(config)  # before _agent_inputs pops the flags
        inputs = _agent_inputs(config)
        world = world_inputs(self.spec.make_batched(num_envs, **config))
        return BatchedVectorEnv(
            world, lambda slot: _adapt(inputs(slot), config, with_time, state_source, self.spec)
        )


@dataclass(frozen=True)
class EnvHandle:
    """A registered env name with its arguments; what ``Algo.fit`` trains on."""

    name: str
    env_args: dict[str, Any] = field(default_factory=dict)

    @property
    def is_multi_agent(self) -> bool:
        return not is_gymnasium_id(self.name)

    @property
    def spec(self) -> EnvSpec:
        return get_env_spec(self.name)

    @property
    def hyperparam_source(self) -> str:
        return self.spec.hyperparam_source if self.is_multi_agent else "common"

    @property
    def rllib_env_id(self) -> str:
        """The name under which Ray Tune's env registry knows this env."""
        return f"{RLLIB_ENV_PREFIX}{self.name}" if self.is_multi_agent else self.name

    @classmethod
    def from_rllib_env_id(cls, env_id: str) -> EnvHandle | None:
        """The handle of an env registered by ``register_with_rllib`` (None for other
        ids, e.g. a gymnasium id)."""
        if not env_id.startswith(RLLIB_ENV_PREFIX):
            return None
        return cls(env_id[len(RLLIB_ENV_PREFIX) :])

    def register_with_rllib(self) -> str:
        """Registers the RLlib env creator (a ``ParallelEnvAdapter``) and returns its id."""
        if self.is_multi_agent:
            from ray.tune.registry import register_env

            register_env(self.rllib_env_id, RllibEnvCreator(self.spec))
        return self.rllib_env_id

    def make_rllib_env(self) -> ParallelEnvAdapter:
        return _make_rllib_env(self.env_args, spec=self.spec)

    @functools.cached_property
    def layout(self) -> EnvLayout:
        if not self.is_multi_agent:
            env = gym.make(self.name, **self.env_args)
            layout = EnvLayout(
                ("agent",), {"agent": env.observation_space}, {"agent": env.action_space}, None
            )
            env.close()
            return layout
        env = self.make_rllib_env()
        agents = tuple(sorted(env.par_env.possible_agents))
        layout = EnvLayout(
            agents=agents,
            # The adapter's spaces: masked observations are {"observation", "action_mask"}.
            observation_spaces={a: env.observation_space[a] for a in agents},
            action_spaces={a: env.action_space[a] for a in agents},
            state_space=env.state_space,
            team_of=self.spec.team_of(agents),
        )
        env.close()
        return layout


def make_env(
    name: str | None = None,
    *,
    environment_name: str | None = None,
    map_name: str | None = None,
    **env_args: Any,
) -> EnvHandle:
    """A handle on a registered env.

    ``make_env("mpe:simple_spread", N=4)``, or MARLlib's spelling
    ``make_env(environment_name="mpe", map_name="simple_spread", N=4)``. Any
    registered gymnasium id is accepted too (single-agent algorithms only).
    """
    if name is None:
        if environment_name is None or map_name is None:
            raise ConfigError("make_env needs a name, or environment_name and map_name")
        name = f"{environment_name}:{map_name}"
    if not is_gymnasium_id(name):
        get_env_spec(name)  # unknown names fail here, with suggestions
    return EnvHandle(name, dict(env_args))
