"""Safe-MARL settings: the cost constraint and each multiplier's or update's knobs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TypeVar

from marllib_ext.algos.config import CentralCriticSettings, Check
from marllib_ext.envs.handle import EnvHandle

SettingsT = TypeVar("SettingsT")


@dataclass(frozen=True)
class CostFields:
    """The cost constraint: mean team episode cost <= ``cost_limit``, for each team.

    ``teams`` is never read from YAML: resolving (:func:`with_teams`) fills the env's
    teams (team name, its agents); on a mixed env every team has its own cost, cost
    critic and multiplier, all with the same ``cost_limit``."""

    cost_limit: float
    lagrangian_multiplier_init: float
    teams: tuple[tuple[str, tuple[str, ...]], ...] = field(
        default=(), kw_only=True, metadata={"derived_from_env": True}
    )

    def checks(self) -> list[Check]:
        return [
            (self.cost_limit >= 0, "cost_limit", "must be >= 0"),
            (self.lagrangian_multiplier_init >= 0, "lagrangian_multiplier_init", "must be >= 0"),
        ]


@dataclass(frozen=True)
class LagrangeFields:
    """Adam-updated multiplier (SafePO's ``Lagrange``)."""

    lagrangian_multiplier_lr: float
    lagrangian_upper_bound: float | None

    def checks(self) -> list[Check]:
        return [
            (self.lagrangian_multiplier_lr > 0, "lagrangian_multiplier_lr", "must be > 0"),
            (
                self.lagrangian_upper_bound is None or self.lagrangian_upper_bound >= 0,
                "lagrangian_upper_bound",
                "must be >= 0 or null",
            ),
        ]


@dataclass(frozen=True)
class LagSettings(CentralCriticSettings, CostFields, LagrangeFields):
    """``mappo_lag``."""


@dataclass(frozen=True)
class PIDLagSettings(CentralCriticSettings, CostFields):
    """``mappo_pid_lag``: the PID controller's gains (SafePO CPPO-PID defaults)."""

    pid_kp: float
    pid_ki: float
    pid_kd: float
    pid_d_delay: int
    pid_delta_p_ema_alpha: float
    pid_delta_d_ema_alpha: float
    pid_sum_norm: bool
    pid_diff_norm: bool
    pid_penalty_max: float

    def checks(self) -> list[Check]:
        return [
            *((getattr(self, k) >= 0, k, "must be >= 0") for k in ("pid_kp", "pid_ki", "pid_kd")),
            (self.pid_d_delay >= 1, "pid_d_delay", "must be >= 1"),
            *(
                (0 <= getattr(self, k) < 1, k, "must be in [0, 1)")
                for k in ("pid_delta_p_ema_alpha", "pid_delta_d_ema_alpha")
            ),
        ]


@dataclass(frozen=True)
class CUPSettings(CentralCriticSettings, CostFields, LagrangeFields):
    """``mappo_cup``: ``cup_lambda`` is the GAE lambda in CUP's projection weight."""

    cup_lambda: float

    def checks(self) -> list[Check]:
        return [
            (0 <= self.cup_lambda <= 1, "cup_lambda", "must be in [0, 1]"),
            (self.gamma < 1, "gamma", "CUP needs gamma < 1"),
        ]


@dataclass(frozen=True)
class FOCOPSSettings(CentralCriticSettings, CostFields, LagrangeFields):
    """``mappo_focops``: temperature ``focops_lam`` and KL radius ``focops_eta``."""

    focops_lam: float
    focops_eta: float

    def checks(self) -> list[Check]:
        return [
            (self.focops_lam > 0, "focops_lam", "must be > 0"),
            (self.focops_eta > 0, "focops_eta", "must be > 0"),
        ]


def with_teams(settings: SettingsT, env: EnvHandle) -> SettingsT:
    """``settings`` with the env's teams resolved (the form that travels)."""
    return dataclasses.replace(settings, teams=tuple(env.layout.teams.items()))
