"""Envs usable by name without registering: ``pz:<module>`` (any PettingZoo
ParallelEnv), ``lbf:<gymnasium id>``, ``rware:<gymnasium id>``,
``mamujoco:<scenario>``, ``hanabi:<preset>``, ``magent:<task>``, ``vmas:<task>``,
``smax:<scenario>`` and ``grf:<scenario>`` (optional extras)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from marllib_ext.configs import ENV_PRESET_DIR, load_yaml
from marllib_ext.envs.grf import GRF_SCENARIOS, grf_spec
from marllib_ext.envs.jaxmarl_specs import jaxmarl_spec, smax_spec
from marllib_ext.envs.spec import EnvSpec, PolicyMappingInfo
from marllib_ext.errors import ConfigError, install_hint


@dataclass(frozen=True)
class EnvFamily:
    """An env family used by name with an id (not listed one by one)."""

    pattern: str
    example: str
    extra: str  # the pip extra it needs ("" for none)
    description: str
    modules: tuple[str, ...] = ()  # what the extra installs (import names)
    build: Callable[[str], EnvSpec] | None = None  # the spec of one env of the family
    install: str = ""  # how to install it where no pip extra can

    @property
    def prefix(self) -> str:
        """``lbf:`` of ``lbf:<gymnasium id>``: the names the family builds."""
        return self.pattern[: self.pattern.index("<")]

    @property
    def installed(self) -> bool:
        return all(importlib.util.find_spec(module) for module in self.modules)


# The Hanabi Learning Environment's presets as hanabi_v5 arguments
# (configs/env_presets/hanabi.yaml).
HANABI_PRESETS = load_yaml(ENV_PRESET_DIR / "hanabi.yaml")


def group_prefix(agent: str) -> str:
    """``adversary_0`` -> ``adversary_``: the agent id up to its last ``_``."""
    head, sep, _ = agent.rpartition("_")
    return f"{head}{sep}" if sep else agent


def pettingzoo_spec(name: str) -> EnvSpec:
    """The spec of ``pz:<module>``: any PettingZoo ParallelEnv by module path, built by
    ``<module>.parallel_env(**env_args)``. Groups (and teams) come from agent-id
    prefixes; ``share_policy="all"`` is allowed when every agent has the same spaces;
    the episode limit is the env's ``max_cycles`` where it has one."""
    module_name = name.removeprefix("pz:")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"env {name!r}: cannot import module {module_name!r} ({e})") from e
    creator = getattr(module, "parallel_env", None)
    if not callable(creator):
        raise ConfigError(
            f"env {name!r}: module {module_name!r} has no parallel_env(**kwargs) "
            "(PettingZoo's parallel API); register a factory with register_env instead"
        )
    try:
        env = creator()
    except Exception as e:  # noqa: BLE001 - any failure of a foreign env is reported
        raise ConfigError(f"env {name!r}: {module_name}.parallel_env() failed: {e}") from e
    agents = list(env.possible_agents)
    same_spaces = all(
        env.observation_space(a) == env.observation_space(agents[0])
        and env.action_space(a) == env.action_space(agents[0])
        for a in agents
    )
    max_cycles = getattr(env.unwrapped, "max_cycles", None)
    env.close()
    family = module_name.split(".")[0]
    return EnvSpec(
        name=name,
        creator=creator,
        policy_mapping=PolicyMappingInfo(
            team_prefix=tuple(sorted({group_prefix(a) for a in agents})),
            all_agents_one_policy=same_spaces,
            one_agent_one_policy=True,
            description=f"{module_name}.parallel_env (PettingZoo)",
        ),
        hyperparam_source="mpe" if family == "mpe2" else "common",
        max_episode_steps="max_cycles" if isinstance(max_cycles, int) else None,
        env_args={"max_cycles": max_cycles} if isinstance(max_cycles, int) else {},
    )


def tuple_agents_spec(name: str) -> EnvSpec:
    """The spec of ``lbf:<gymnasium id>`` / ``rware:<gymnasium id>`` (optional extras):
    one cooperative team, ``share_policy`` by whether the agents' spaces match, the
    episode length the env enforces."""
    from marllib_ext.envs.tuple_agents import episode_limit_of, make_tuple_agents_env

    family, _, env_id = name.partition(":")
    creator = functools.partial(make_tuple_agents_env, family, env_id)
    env = creator()
    agents = list(env.possible_agents)
    same_spaces = all(
        env.observation_space(a) == env.observation_space(agents[0])
        and env.action_space(a) == env.action_space(agents[0])
        for a in agents
    )
    limit = episode_limit_of(env.env)
    env.close()
    return EnvSpec(
        name=name,
        creator=creator,
        policy_mapping=PolicyMappingInfo(
            team_prefix=("agent_",),
            all_agents_one_policy=same_spaces,
            one_agent_one_policy=True,
            description=f"{family} {env_id}",
        ),
        hyperparam_source=family,
        state_source="observations",
        max_episode_steps=limit,
    )


def _mamujoco_env(scenario: str, agent_conf: str | None = None, **kwargs):
    try:
        from gymnasium_robotics import mamujoco_v1
    except ImportError as e:
        raise ConfigError(
            f"mamujoco:{scenario} needs gymnasium-robotics and mujoco: "
            f"{install_hint('mamujoco')} ({e})"
        ) from e
    try:
        return mamujoco_v1.parallel_env(scenario, agent_conf, **kwargs)
    except Exception as e:  # noqa: BLE001 - MaMuJoCo reports bad scenarios many ways
        raise ConfigError(f"env 'mamujoco:{scenario}' with agent_conf={agent_conf!r}: {e}") from e


def mamujoco_spec(name: str) -> EnvSpec:
    """``mamujoco:<scenario>`` (gymnasium-robotics' MaMuJoCo, e.g. ``HalfCheetah`` with
    env arg ``agent_conf=2x3``): one team, global state from ``state()``, the episode
    limit of the underlying gymnasium MuJoCo env (1000 steps)."""
    scenario = name.partition(":")[2]
    creator = functools.partial(_mamujoco_env, scenario)
    env = creator()
    limit = env.single_agent_env.spec.max_episode_steps if env.single_agent_env.spec else None
    env.close()
    return EnvSpec(
        name=name,
        creator=creator,
        policy_mapping=PolicyMappingInfo(
            team_prefix=("agent_",),
            all_agents_one_policy=False,  # agents control different joints
            one_agent_one_policy=True,
            description=f"MaMuJoCo {scenario}",
        ),
        hyperparam_source="mamujoco",
        state_source="env",
        max_episode_steps=limit,
    )


def _hanabi_env(preset: str, players: int = 2, **kwargs):
    import pettingzoo
    from pettingzoo.env_registry.exceptions import FailedToImport

    from marllib_ext.envs.turns import TurnBasedParallelEnv

    arguments = {"players": players, **HANABI_PRESETS[preset], **kwargs}
    try:  # PettingZoo's registry (importing ``pettingzoo.classic.hanabi_v5`` is deprecated)
        return TurnBasedParallelEnv(pettingzoo.make("aec", "classic/hanabi_v5", **arguments))
    except (ImportError, FailedToImport) as e:
        raise ConfigError(
            f"hanabi:{preset} needs OpenSpiel and shimmy: {install_hint('hanabi')} ({e})"
        ) from e
    except ValueError as e:
        raise ConfigError(
            f"env 'hanabi:{preset}' with {dict(players=players, **kwargs)}: {e}"
        ) from e


def hanabi_spec(name: str) -> EnvSpec:
    """``hanabi:<preset>`` (``full``, ``small``; env args override the preset, e.g.
    ``players=3``): players take turns, each step only the player to move observes
    (the others are absent), moves are masked, every player gets the score's change.
    One team; players share a policy by default."""
    preset = name.partition(":")[2]
    if preset not in HANABI_PRESETS:
        raise ConfigError(f"unknown Hanabi preset {preset!r}; presets: {sorted(HANABI_PRESETS)}")
    return EnvSpec(
        name=name,
        creator=functools.partial(_hanabi_env, preset),
        policy_mapping=PolicyMappingInfo(
            team_prefix=("player_",),
            all_agents_one_policy=True,
            one_agent_one_policy=True,
            description=f"Hanabi ({preset}), turn-taking, action masks",
        ),
        hyperparam_source="hanabi",
        # Each player's last view: the state shows every hand (docs/benchmarks/envs.md).
        state_source="latest_observations",
        turn_based=True,
    )


def magent_spec(name: str) -> EnvSpec:
    """``magent:<task>``: MAgent2 on a small map (``map_size``, ``max_cycles`` 100;
    env args override), observations and state flattened, teams by agent-id prefix
    (``share_policy="group"``). ``--env-arg opponent=random`` (or
    ``opponent=checkpoint:<path>``) plays the last team (``opponent_team``) with that
    fixed policy, so the others train against it."""
    from marllib_ext.envs.magent import MAGENT_TASKS, magent_env

    task = name.partition(":")[2]
    if task not in MAGENT_TASKS:
        raise ConfigError(f"unknown MAgent2 task {task!r}; tasks: {sorted(MAGENT_TASKS)}")
    teams = MAGENT_TASKS[task].teams
    prefixes = tuple(p for team in teams.values() for p in team)
    return EnvSpec(
        name=name,
        creator=functools.partial(magent_env, task),
        policy_mapping=PolicyMappingInfo(
            team_prefix=prefixes,
            all_agents_one_policy=len(teams) == 1,
            one_agent_one_policy=True,
            description=f"MAgent2 {task} (small map), agents die",
        ),
        hyperparam_source="magent",
        state_source="env",
        max_episode_steps="max_cycles",
        env_args=dict(MAGENT_TASKS[task].preset),
        teams=teams,
    )


def vmas_spec(name: str) -> EnvSpec:
    """``vmas:<task>``: one VMAS world per single env and one batched VMAS simulator of
    ``num_envs_per_env_runner`` worlds per env runner (``EnvSpec.batched_creator``);
    BenchMARL's task settings (env args override), one cooperative team, the global
    state from every agent's observation, the episode limit ``max_steps``."""
    from marllib_ext.envs.vmas import VMAS_TASKS, vmas_env, vmas_world

    task = name.partition(":")[2]
    if task not in VMAS_TASKS:
        raise ConfigError(f"unknown VMAS task {task!r}; tasks: {sorted(VMAS_TASKS)}")
    return EnvSpec(
        name=name,
        creator=functools.partial(vmas_env, task),
        batched_creator=functools.partial(vmas_world, task),
        policy_mapping=PolicyMappingInfo(
            team_prefix=("agent_",),
            all_agents_one_policy=True,
            one_agent_one_policy=True,
            description=f"VMAS {task}",
        ),
        hyperparam_source="vmas",
        state_source="observations",
        max_episode_steps="max_steps",
        env_args=dict(VMAS_TASKS[task]),
    )


def spec_by_name(name: str) -> EnvSpec | None:
    """The spec for a by-name env, ``None`` for any other name."""
    for family in ENV_FAMILIES:
        if name.startswith(family.prefix):
            return family.build(name)
    return None


ENV_FAMILIES = (
    EnvFamily(
        "pz:<module>",
        "pz:mpe2.simple_tag_v3",
        "",
        "any PettingZoo ParallelEnv module (parallel_env(**env_args))",
        build=pettingzoo_spec,
    ),
    EnvFamily(
        "lbf:<gymnasium id>",
        "lbf:Foraging-8x8-2p-2f-coop-v3",
        "lbf",
        "Level-Based Foraging (lbforaging)",
        ("lbforaging",),
        build=tuple_agents_spec,
    ),
    EnvFamily(
        "rware:<gymnasium id>",
        "rware:rware-tiny-2ag-v2",
        "rware",
        "multi-robot warehouse (rware)",
        ("rware",),
        build=tuple_agents_spec,
    ),
    EnvFamily(
        "mamujoco:<scenario>",
        "mamujoco:HalfCheetah --env-arg agent_conf=2x3",
        "mamujoco",
        "multi-agent MuJoCo (gymnasium-robotics), continuous joints",
        ("gymnasium_robotics", "mujoco"),
        build=mamujoco_spec,
    ),
    EnvFamily(
        "hanabi:<preset>",
        "hanabi:small --env-arg players=2",
        "hanabi",
        "Hanabi (PettingZoo classic over OpenSpiel), turn-taking, action masks; presets "
        "full, small",
        ("pyspiel", "shimmy"),
        build=hanabi_spec,
    ),
    EnvFamily(
        "magent:<task>",
        "magent:battle_v4 --env-arg opponent=random",
        "magent",
        "MAgent2 battles (agents die), small maps; tasks battle_v4, adversarial_pursuit_v4, "
        "battlefield_v5, combined_arms_v6, gather_v5, tiger_deer_v4",
        ("magent2",),
        build=magent_spec,
    ),
    EnvFamily(
        "vmas:<task>",
        "vmas:navigation --env-arg n_agents=4",
        "vmas",
        "VMAS (vectorized physics) on its own batching, BenchMARL's task settings; continuous "
        "actions (continuous_actions=false: discrete)",
        ("vmas",),
        build=vmas_spec,
    ),
    EnvFamily(
        "smax:<scenario>",
        "smax:3m",
        "smax",
        "SMAX (JaxMARL's SMAC re-implementation) against its heuristic enemy, on its own "
        "batching; action masks, units die; scenarios 3m, 2s3z, 3s_vs_5z, 5m_vs_6m, "
        "6h_vs_8z, 10m_vs_11m, 27m_vs_30m, 3s5z_vs_3s6z and SMAX's own",
        ("jaxmarl", "jax"),
        build=smax_spec,
    ),
    EnvFamily(
        "jaxmarl:<env>[:<layout>]",
        "jaxmarl:overcooked:cramped_room",
        "smax",
        "JaxMARL's envs on their own batching: overcooked (layouts cramped_room, "
        "asymm_advantages, coord_ring, forced_coord, counter_circuit), overcooked_v2:<layout>, "
        "coin_game, switch_riddle, smax:<map>",
        ("jaxmarl", "jax"),
        build=jaxmarl_spec,
    ),
    EnvFamily(
        "grf:<scenario>",
        "grf:academy_3_vs_1_with_keeper",
        "",
        "Google Research Football (gfootball 2.10.2, a source build: docs/envs.md), "
        "simple115v2, scoring and checkpoint rewards; scenarios " + ", ".join(GRF_SCENARIOS),
        ("gfootball", "gym"),
        build=grf_spec,
        install="a source build of gfootball, docs/envs.md",
    ),
)
