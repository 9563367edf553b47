"""Where EFX's budget range comes from: ``z_bounds: intrinsic`` (``[0, Z_max]`` from the
env's episode limit and action spaces) or ``reward`` (seed 000's ``[-R_max, -R_min]``)."""

from __future__ import annotations

import dataclasses
from typing import Protocol, TypeVar

import gymnasium as gym
import numpy as np

from marllib_ext.algos.efx.settings import Z_BOUNDS_MODES
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.ops.efx import (
    GAUSSIAN_ENTROPY_UNIT_STD,
    intrinsic_budget_bound,
    max_action_entropy,
)
from marllib_ext.postprocessing.budget_input import TeamBudget

__all__ = ["Z_BOUNDS_MODES", "budget_bounds", "extrinsic_scale", "with_resolved_budget"]
SettingsT = TypeVar("SettingsT")


class BudgetSettings(Protocol):
    intrinsic_coef: float
    intrinsic_reward: str
    count_scope: str
    rnd_scope: str
    z_bounds: str
    z_init: float | None
    z_low: float | None
    z_high: float | None
    gaussian_entropy_per_dim: float | None


def action_entropy_bound(space: gym.Space, *, agent: str, entropy_per_dim: float | None) -> float:
    """``H_max`` of one agent's action space (see ``ops.efx.max_action_entropy``)."""
    if isinstance(space, gym.spaces.Discrete):
        return max_action_entropy(int(space.n))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return max_action_entropy(nvec=space.nvec)
    if isinstance(space, gym.spaces.Box):
        per_dim = GAUSSIAN_ENTROPY_UNIT_STD if entropy_per_dim is None else entropy_per_dim
        return max_action_entropy(
            continuous_dims=int(np.prod(space.shape)), entropy_per_dim=per_dim
        )
    raise ConfigError(
        f"agent {agent!r} has action space {space}; z_bounds: intrinsic supports Discrete, "
        "MultiDiscrete and Box (set z_low and z_high explicitly otherwise)"
    )


def intrinsic_z_max(
    settings: BudgetSettings, env: EnvHandle, agents: tuple[str, ...] | None = None
) -> float:
    """``Z_max = c * T_max * sum_{i in agents} H_max(i)`` for ``env`` at its env
    arguments (``agents``: one team; default every agent), ``H_max(i)`` the largest
    per-step intrinsic reward of agent ``i`` over ``c``: its action entropy bound for
    ``surprisal``; 1 for ``count`` (a first visit) and ``rnd`` (its bonus's bound), 1
    per team step with ``count_scope`` / ``rnd_scope: team`` (the bonus is split
    among the agents)."""
    t_max = env.spec.episode_limit(env.env_args)
    if t_max is None:
        raise ConfigError(
            f"env {env.name!r} declares no max_episode_steps, which z_bounds: intrinsic "
            "needs (register_env(..., max_episode_steps=...)); or set z_low and z_high"
        )
    layout = env.layout
    team = layout.agents if agents is None else agents
    signal = getattr(settings, "intrinsic_reward", "surprisal")
    if signal in ("count", "rnd"):
        scope = settings.count_scope if signal == "count" else settings.rnd_scope
        per_agent = 1.0 / len(team) if scope == "team" else 1.0
        return intrinsic_budget_bound(
            coef=settings.intrinsic_coef,
            max_episode_steps=t_max,
            max_entropies=[per_agent] * len(team),
        )
    entropies = [
        action_entropy_bound(
            layout.action_spaces[agent],
            agent=agent,
            entropy_per_dim=settings.gaussian_entropy_per_dim,
        )
        for agent in team
    ]
    return intrinsic_budget_bound(
        coef=settings.intrinsic_coef, max_episode_steps=t_max, max_entropies=entropies
    )


def budget_bounds(
    settings: BudgetSettings, env: EnvHandle, agents: tuple[str, ...] | None = None
) -> tuple[float, float, float]:
    """``(z_low, z_high, z_init)`` of the team ``agents`` (default every agent). Unset
    bounds come from ``z_bounds``: ``intrinsic`` gives ``[0, Z_max]`` over the team's
    agents; ``reward`` gives ``[-R_max, -R_min]`` from the env's declared team return
    range (seed 000 read literally; one-team envs only). ``z_init`` defaults to
    ``z_low``; explicit ``z_low``/``z_high``/``z_init`` apply to every team."""
    z_low, z_high = settings.z_low, settings.z_high
    if z_low is None or z_high is None:
        if settings.z_bounds == "intrinsic":
            default_low, default_high = 0.0, intrinsic_z_max(settings, env, agents)
        else:
            reward_range = env.spec.reward_range
            if agents is not None and len(env.layout.teams) > 1:
                raise ConfigError(
                    f"z_bounds: reward uses env {env.name!r}'s one declared return range, "
                    f"and the env has teams {sorted(env.layout.teams)}; use z_bounds: "
                    "intrinsic or set z_low and z_high"
                )
            if reward_range is None:
                raise ConfigError(
                    f"env {env.name!r} declares no reward_range, which z_bounds: reward "
                    "needs; set z_low and z_high explicitly (e.g. --set z_low=-10 --set "
                    "z_high=0)"
                )
            default_low, default_high = -reward_range[1], -reward_range[0]
        z_low = default_low if z_low is None else z_low
        z_high = default_high if z_high is None else z_high
    if z_low > z_high:
        raise ConfigError(f"budget bounds z_low={z_low} > z_high={z_high}")
    z_init = z_low if settings.z_init is None else settings.z_init
    if not z_low <= z_init <= z_high:
        raise ConfigError(f"config key 'z_init' = {z_init} is outside [{z_low}, {z_high}]")
    # + 0.0 turns -0.0 (from -R_min = -0) into 0.0 for display.
    return float(z_low) + 0.0, float(z_high) + 0.0, float(z_init) + 0.0


def extrinsic_scale(env: EnvHandle) -> float:
    """Scale of ``J_ext`` differences in the outer loop: the declared return range's width."""
    reward_range = env.spec.reward_range
    if reward_range is None or reward_range[1] <= reward_range[0]:
        return 1.0
    return float(reward_range[1] - reward_range[0])


def with_resolved_budget(settings: SettingsT, env: EnvHandle) -> SettingsT:
    """``settings`` with one :class:`TeamBudget` per team of ``env`` and ``z_ext_scale``
    resolved (the form that travels to learners, env runners and callbacks); on a
    one-team env ``z_low``, ``z_high`` and ``z_init`` are that team's range."""
    teams = env.layout.teams
    team_budgets = tuple(
        TeamBudget(team, agents, *budget_bounds(settings, env, agents))
        for team, agents in teams.items()
    )
    single = team_budgets[0] if len(team_budgets) == 1 else None
    ext_scale = settings.z_ext_scale
    return dataclasses.replace(
        settings,
        team_budgets=team_budgets,
        z_low=single.z_low if single else None,
        z_high=single.z_high if single else None,
        z_init=single.z_init if single else None,
        z_ext_scale=extrinsic_scale(env) if ext_scale is None else float(ext_scale),
    )
