"""JaxMARL's envs by name: which ones the adapter (``envs.jaxmarl``) serves, how each is
built and read, the names it refuses and why, and the ``EnvSpec`` of ``smax:<map>`` and
``jaxmarl:<env>[:<layout>]``. Nothing here imports JAX until an env is built."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marllib_ext.envs.spec import EnvSpec, PolicyMappingInfo
from marllib_ext.errors import ConfigError, install_hint

OVERCOOKED_LAYOUTS = (
    "cramped_room", "asymm_advantages", "coord_ring", "forced_coord", "counter_circuit",
)  # fmt: skip


@dataclass(frozen=True)
class JaxMarlFamily:
    """How one JaxMARL env is built and read.

    Attributes:
        jaxmarl_id: the name ``jaxmarl.make`` knows.
        layouts: the accepted ``<layout>`` parts (empty: the name takes none).
        default_layout: the layout of a name without one.
        layout_args: ``layout -> make's keyword arguments``.
        time_limit: ``env -> T`` where an episode that reaches ``T`` steps is cut by
            time (truncated), or ``None`` where every end is a terminal one.
        shaped: the env reports ``info["shaped_reward"]`` per agent.
        description: one line for ``marllib-ext envs``.
    """

    jaxmarl_id: str
    layouts: tuple[str, ...] = ()
    default_layout: str | None = None
    layout_args: Callable[[str], dict[str, Any]] | None = None
    time_limit: Callable[[Any], int | None] = lambda env: None
    shaped: bool = False
    description: str = ""


def _overcooked_v1_layout(layout: str) -> dict[str, Any]:
    from jaxmarl.environments.overcooked import overcooked_layouts

    return {"layout": overcooked_layouts[layout]}


def _overcooked_v2_layouts() -> tuple[str, ...]:
    try:
        from jaxmarl.environments.overcooked_v2.layouts import overcooked_v2_layouts
    except ImportError:  # JaxMARL is missing: the names are checked when it is there
        return ()
    return tuple(overcooked_v2_layouts)


FAMILIES: dict[str, JaxMarlFamily] = {
    "overcooked": JaxMarlFamily(
        "overcooked",
        layouts=OVERCOOKED_LAYOUTS,
        default_layout="cramped_room",
        layout_args=_overcooked_v1_layout,
        time_limit=lambda env: int(env.max_steps),
        shaped=True,
        description="Overcooked (Carroll et al. 2019), 2 cooks, 400 steps, 20 per soup served",
    ),
    "overcooked_v2": JaxMarlFamily(
        "overcooked_v2",
        layouts=("*",),  # checked against JaxMARL's own list when built
        default_layout="cramped_room",
        layout_args=lambda layout: {"layout": layout},
        time_limit=lambda env: int(env.max_steps),
        shaped=True,
        description="Overcooked-V2 (Gessler et al. 2025), recipes and partial observability",
    ),
    "coin_game": JaxMarlFamily(
        "coin_game",
        time_limit=lambda env: int(env.num_inner_steps) * int(env.num_outer_steps),
        description="Coin Game, 2 agents, each its own reward (general-sum)",
    ),
    "switch_riddle": JaxMarlFamily(
        "switch_riddle",
        description="Switch Riddle (Foerster et al. 2016), team reward at the end",
    ),
}

# Envs JaxMARL ships that this adapter does not serve, and why.
REFUSED = {
    "storm": "STORM hands out one stacked observation array and a shared inventory table "
    "instead of one observation per agent",
    "storm_2p": "STORM hands out one stacked observation array and a shared inventory table "
    "instead of one observation per agent",
    "storm_np": "STORM hands out one stacked observation array and a shared inventory table "
    "instead of one observation per agent",
    "jaxnav": "JaxNav's agents act in continuous velocities on their own clocks; the adapter "
    "serves discrete actions",
    "hanabi": "use hanabi:<preset> (OpenSpiel's Hanabi through PettingZoo, turn-based)",
    "ant_4x2": "MABrax needs brax; use mamujoco:<scenario> (gymnasium-robotics)",
    "halfcheetah_6x1": "MABrax needs brax; use mamujoco:<scenario> (gymnasium-robotics)",
    "hopper_3x1": "MABrax needs brax; use mamujoco:<scenario> (gymnasium-robotics)",
    "humanoid_9|8": "MABrax needs brax; use mamujoco:<scenario> (gymnasium-robotics)",
    "walker2d_2x3": "MABrax needs brax; use mamujoco:<scenario> (gymnasium-robotics)",
}


def parse_name(name: str) -> tuple[str, str | None]:
    """``"overcooked:cramped_room"`` -> ``("overcooked", "cramped_room")`` (the part after
    ``jaxmarl:``); a name without a layout gets its family's default. Raises
    ``ConfigError`` naming the env or the layout."""
    env, _, layout = name.partition(":")
    if env in REFUSED:
        raise ConfigError(f"jaxmarl:{env} is not served: {REFUSED[env]}")
    if env not in FAMILIES:
        raise ConfigError(f"unknown JaxMARL env {env!r}; served: {sorted(FAMILIES)} and smax:<map>")
    family = FAMILIES[env]
    if not layout:
        return env, family.default_layout
    if not family.layouts:
        raise ConfigError(f"jaxmarl:{env} takes no layout, got {layout!r}")
    known = _overcooked_v2_layouts() if family.layouts == ("*",) else family.layouts
    if known and layout not in known:
        raise ConfigError(f"unknown layout {layout!r} of jaxmarl:{env}; layouts: {known}")
    return env, layout


def make_jaxmarl_env(env: str, layout: str | None, env_args: dict[str, Any]) -> Any:
    """The JaxMARL env of ``env`` / ``layout`` with ``env_args`` (make's keyword
    arguments); ``ConfigError`` names what JaxMARL rejected."""
    try:
        import jaxmarl
    except ImportError as e:
        raise ConfigError(f"jaxmarl:{env} needs JaxMARL: {install_hint('smax')} ({e})") from e
    family = FAMILIES[env]
    kwargs = dict(family.layout_args(layout)) if layout is not None else {}
    kwargs.update(env_args)
    try:
        return jaxmarl.make(family.jaxmarl_id, **kwargs)
    except TypeError as e:
        raise ConfigError(f"env 'jaxmarl:{env}' rejected {env_args}: {e}") from e


def smax_spec(name: str) -> EnvSpec:
    """``smax:<scenario>``: SMAX battles against the heuristic enemy, one batched
    simulator of ``num_envs_per_env_runner`` battles per env runner; action masks, dead
    units absent, SMAX's world state for the critics, the episode limit ``max_steps``."""
    from marllib_ext.envs.smax import SMAX_SCENARIOS, smax_env, smax_world

    scenario = name.partition(":")[2]
    if scenario not in SMAX_SCENARIOS:
        raise ConfigError(f"unknown SMAX scenario {scenario!r}; scenarios: {SMAX_SCENARIOS}")
    return EnvSpec(
        name=name,
        creator=functools.partial(smax_env, scenario),
        batched_creator=functools.partial(smax_world, scenario),
        policy_mapping=PolicyMappingInfo(
            team_prefix=("ally_",),
            all_agents_one_policy=True,
            one_agent_one_policy=True,
            description=f"SMAX {scenario} against the heuristic enemy, units die",
        ),
        hyperparam_source="smax",
        state_source="env",
        max_episode_steps="max_steps",
        env_args={"max_steps": 100},
    )


def jaxmarl_spec(name: str) -> EnvSpec:
    """``jaxmarl:<env>[:<layout>]``: a JaxMARL env on its own batching (``envs.jaxmarl``),
    one simulator of ``num_envs_per_env_runner`` worlds per env runner;
    ``jaxmarl:smax:<map>`` is ``smax:<map>``."""
    rest = name.partition(":")[2]
    if rest.startswith("smax:"):
        return dataclasses.replace(smax_spec(rest), name=name)
    env, layout = parse_name(rest)
    family = FAMILIES[env]
    full = f"{env}:{layout}" if layout else env
    overcooked = family.shaped
    return EnvSpec(
        name=name,
        creator=functools.partial(jaxmarl_env, full),
        batched_creator=functools.partial(jaxmarl_world, full),
        policy_mapping=PolicyMappingInfo(
            team_prefix=("",),
            all_agents_one_policy=True,
            one_agent_one_policy=True,
            description=f"JaxMARL {full}: {family.description}",
        ),
        hyperparam_source="overcooked" if overcooked else "jaxmarl",
        state_source="observations",
        # JaxMARL's IPPO on Overcooked: the shaped reward at full weight, annealed to 0
        # over 2.5M env steps (REW_SHAPING_HORIZON, baselines/IPPO/config).
        env_args=(
            {"max_steps": 400, "shaped_reward": 1.0, "shaped_reward_horizon": 2_500_000}
            if overcooked
            else {}
        ),
        max_episode_steps="max_steps" if overcooked else None,
    )


def jaxmarl_world(name: str, num_envs: int, **env_args: Any) -> Any:
    """``num_envs`` worlds of ``jaxmarl:<name>`` stepped by one batched call
    (``env_args``: the env's own arguments, plus ``seed``, ``render_mode``,
    ``shaped_reward`` and ``shaped_reward_horizon``)."""
    from marllib_ext.envs.jaxmarl import JaxMarlWorld, OvercookedWorld

    env, layout = parse_name(name)
    adapter_args = {
        key: env_args.pop(key)
        for key in ("seed", "render_mode", "shaped_reward", "shaped_reward_horizon")
        if key in env_args
    }
    jax_env = make_jaxmarl_env(env, layout, env_args)
    family = FAMILIES[env]
    world_class = OvercookedWorld if family.shaped else JaxMarlWorld
    return world_class(
        jax_env,
        num_envs,
        time_limit=family.time_limit(jax_env),
        name=f"jaxmarl:{name}",
        **adapter_args,
    )


def jaxmarl_env(name: str, **env_args: Any) -> Any:
    """One world of ``jaxmarl:<name>`` as a PettingZoo ParallelEnv."""
    return jaxmarl_world(name, 1, **env_args).slots[0]
