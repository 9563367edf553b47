"""Env registry: names like ``mpe:simple_spread`` -> PettingZoo ParallelEnv + policy info.

Built-in entries come from ``configs/envs/<family>.yaml`` (registered as
``<family>:<scenario>``). Users add their own with :func:`register_env`.
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from pettingzoo.utils.env import ParallelEnv

from marllib_ext.configs import ENV_CONFIG_DIR, load_yaml
from marllib_ext.envs.adapter import STATE_SOURCES
from marllib_ext.envs.by_name import spec_by_name
from marllib_ext.envs.spec import EnvSpec, PolicyMappingInfo
from marllib_ext.errors import ConfigError

_REGISTRY: dict[str, EnvSpec] = {}


def register_env(
    name: str,
    creator: Callable[..., ParallelEnv],
    *,
    team_prefix: tuple[str, ...] | list[str] | None = None,
    all_agents_one_policy: bool = True,
    one_agent_one_policy: bool = True,
    env_args: Mapping[str, Any] | None = None,
    hyperparam_source: str = "common",
    state_source: str = "auto",
    description: str = "",
    reward_range: tuple[float, float] | None = None,
    max_episode_steps: int | str | None = None,
    teams: Mapping[str, list[str] | tuple[str, ...]] | None = None,
    turn_based: bool = False,
) -> EnvSpec:
    """Registers a PettingZoo ParallelEnv factory (or an AEC one, ``turn_based``)
    under ``name``.

    Args:
        name: registry name, e.g. ``"my:task"``.
        creator: ``creator(**env_args) -> ParallelEnv``.
        team_prefix: agent-id prefixes that form the groups of ``share_policy="group"``;
            default: one group holding every agent.
        all_agents_one_policy: whether ``share_policy="all"`` is allowed.
        one_agent_one_policy: whether ``share_policy="individual"`` is allowed.
        env_args: default keyword arguments for ``creator``.
        hyperparam_source: which per-env section of the algorithm YAML files applies.
        state_source: ``"auto"`` (``env.state()`` if implemented), ``"env"`` or
            ``"observations"`` (all observations concatenated in sorted agent order).
        description: one line for ``marllib-ext list``.
        reward_range: ``(R_min, R_max)`` of the team episode return; EFXplorer's
            ``z_bounds: reward`` uses ``[-R_max, -R_min]``.
        max_episode_steps: ``T_max``, the longest an episode can last: an int, or the
            name of the env argument that holds it (``"max_cycles"``). EFXplorer's
            default budget bound ``Z_max = c * T_max * sum_i H_max(i)`` needs it.
        teams: team name -> agent-id prefixes, for envs whose teams are not simply the
            ``team_prefix`` groups (a cooperative env with several groups is one team;
            ``simple_world_comm``'s lead adversary plays with the adversaries). Default:
            each ``team_prefix`` group is a team. The joint critics give every team its
            own critic and its own team reward.
        turn_based: ``creator`` builds a turn-taking PettingZoo ``AECEnv``: each step
            only the agent to move observes (``envs.turns.TurnBasedParallelEnv``), and
            runs sample complete episodes.
    """
    if state_source not in STATE_SOURCES:
        raise ConfigError(f"state_source must be one of {STATE_SOURCES}, got {state_source!r}")
    if turn_based:
        creator = functools.partial(_turn_based, creator)
    spec = EnvSpec(
        name=name,
        creator=creator,
        policy_mapping=PolicyMappingInfo(
            team_prefix=tuple(team_prefix or ("",)),
            all_agents_one_policy=all_agents_one_policy,
            one_agent_one_policy=one_agent_one_policy,
            description=description,
        ),
        env_args=dict(env_args or {}),
        hyperparam_source=hyperparam_source,
        state_source=state_source,
        reward_range=None if reward_range is None else _check_range(name, reward_range),
        max_episode_steps=max_episode_steps,
        teams=None if teams is None else {str(k): tuple(v) for k, v in teams.items()},
        turn_based=turn_based,
    )
    spec.episode_limit()  # a bad declaration fails at registration
    _REGISTRY[name] = spec
    return spec


def _turn_based(creator: Callable[..., Any], **env_args: Any) -> ParallelEnv:
    from marllib_ext.envs.turns import TurnBasedParallelEnv

    return TurnBasedParallelEnv(creator(**env_args))


def register_spec(spec: EnvSpec) -> EnvSpec:
    """Registers an already built ``EnvSpec`` (e.g. in a Tune trial's process)."""
    _REGISTRY[spec.name] = spec
    return spec


def _check_range(name: str, reward_range) -> tuple[float, float]:
    low, high = (float(v) for v in reward_range)
    if low > high:
        raise ConfigError(f"env {name!r}: reward_range {reward_range} has min > max")
    return low, high


def _import_factory(path: str) -> Callable[..., ParallelEnv]:
    module_name, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


class _LazyFactory:
    """Imports the env module on first use, so listing envs stays cheap."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, **kwargs: Any) -> ParallelEnv:
        return _import_factory(self.path)(**kwargs)


_BUILTIN: list[str] = []


def builtin_env_names() -> list[str]:
    """The envs shipped in ``configs/envs/*.yaml``, sorted."""
    return sorted(_BUILTIN)


def _register_builtin_envs() -> None:
    for yaml_path in sorted(ENV_CONFIG_DIR.glob("*.yaml")):
        family = yaml_path.stem
        for scenario, entry in load_yaml(yaml_path).items():
            mapping = entry["policy_mapping"]
            register_env(
                f"{family}:{scenario}",
                _LazyFactory(entry["factory"]),
                team_prefix=mapping["team_prefix"],
                all_agents_one_policy=mapping["all_agents_one_policy"],
                one_agent_one_policy=mapping["one_agent_one_policy"],
                env_args=entry.get("env_args", {}),
                hyperparam_source=family,
                state_source=entry.get("state_source", "auto"),
                description=entry.get("description", ""),
                reward_range=entry.get("reward_range"),
                max_episode_steps=entry.get("max_episode_steps"),
                teams=entry.get("teams"),
                turn_based=entry.get("turn_based", False),
            )
            _BUILTIN.append(f"{family}:{scenario}")


def list_envs() -> dict[str, EnvSpec]:
    """All registered multi-agent envs by name."""
    return dict(sorted(_REGISTRY.items()))


def is_gymnasium_id(name: str) -> bool:
    return name in gym.registry


def get_env_spec(name: str) -> EnvSpec:
    """The registry entry for ``name`` (``pz:<module>``, ``lbf:<id>`` and ``rware:<id>``
    are built on first use); an unknown name is a ``ConfigError``."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    spec = spec_by_name(name)
    if spec is not None:
        return register_spec(spec)
    close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(
        f"unknown env {name!r}.{hint} Registered multi-agent envs: {', '.join(_REGISTRY)}; "
        "single-agent algorithms also take any registered gymnasium id."
    )


def make_parallel_env(name: str, **env_args: Any) -> ParallelEnv:
    """The PettingZoo ParallelEnv registered under ``name``, built with ``env_args``."""
    return get_env_spec(name).make(**env_args)


_register_builtin_envs()
