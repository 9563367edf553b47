"""EFXplorer's budget settings (seed 000), mixed into the joint-critic settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from marllib_ext.algos.config import CentralCriticSettings, Check, VDSettings
from marllib_ext.algos.ppo.novelty import NoveltyFields
from marllib_ext.algos.trust_region.settings import TrustRegionFields
from marllib_ext.ops.efx import (
    BUDGET_RANGES,
    EFX_ADVANTAGE_FORMS,
    PUSH_SCALES,
    Z_OPTIMIZERS,
    Z_SAMPLING_MODES,
)
from marllib_ext.ops.novelty import INTRINSIC_SIGNALS
from marllib_ext.postprocessing.budget_input import TeamBudget

Z_BOUNDS_MODES = ("intrinsic", "reward")
# Which parameters the push trains: every actor parameter (policy: the push is added to
# the advantage) or the budget temperature's network only (temperature).
PUSH_GRADIENTS = ("policy", "temperature")
# What the push credits a step with: its own intrinsic reward against its expectation
# (step), or the discounted intrinsic return from it to the end of its segment (return).
PUSH_CREDITS = ("step", "return")


@dataclass(frozen=True)
class EFXFields(NoveltyFields):
    """The budget fields. ``z_low``, ``z_high``, ``z_init`` and ``z_ext_scale`` may be
    ``None`` in YAML; the builder resolves them from the env
    (:func:`marllib_ext.algos.efx.budget_range.with_resolved_budget`) before the settings
    travel to learners, env runners and callbacks.

    ``team_budgets`` is never read from YAML: resolving fills one entry per team of the
    env (one on a cooperative env), each with its own range; ``z_low``/``z_high``/
    ``z_init`` then repeat the single team's range (``None`` with several teams)."""

    intrinsic_coef: float
    z_bounds: str
    z_init: float | None
    z_low: float | None
    z_high: float | None
    gaussian_entropy_per_dim: float | None
    z_sampling: str
    z_deploy_fraction: float
    lr_z: float
    z_optimizer: str
    z_ext_scale: float | None
    efx_advantage: str
    efx_kappa: float
    # A class-level default: settings pickled in checkpoints written before this key
    # existed read back as the range they trained with.
    budget_range: str = field(default="full", kw_only=True)
    evaluation_budget: float | None = field(default=None, kw_only=True)
    budget_temperature: bool = field(default=False, kw_only=True)
    budget_temperature_hidden: int = field(default=16, kw_only=True)
    push_gradient: str = field(default="policy", kw_only=True)
    push_scale: str = field(default="raw", kw_only=True)
    push_credit: str = field(default="step", kw_only=True)
    intrinsic_reward: str = field(default="surprisal", kw_only=True)
    z_ext_tolerance: float = field(default=0.0, kw_only=True)
    budget_bonus_coeff: float = field(default=0.0, kw_only=True)
    team_budgets: tuple[TeamBudget, ...] = field(
        default=(), kw_only=True, metadata={"derived_from_env": True}
    )

    def checks(self) -> list[Check]:
        return [
            (self.intrinsic_coef >= 0, "intrinsic_coef", "must be >= 0"),
            (self.z_bounds in Z_BOUNDS_MODES, "z_bounds", f"one of {Z_BOUNDS_MODES}"),
            (self.z_sampling in Z_SAMPLING_MODES, "z_sampling", f"one of {Z_SAMPLING_MODES}"),
            (0.0 <= self.z_deploy_fraction <= 1.0, "z_deploy_fraction", "must be in [0, 1]"),
            (
                self.z_sampling == "fixed" or self.z_deploy_fraction > 0.0,
                "z_deploy_fraction",
                "the outer loop needs episodes at the deployment budget "
                "(use > 0, or z_sampling: fixed)",
            ),
            (self.lr_z >= 0, "lr_z", "must be >= 0"),
            (self.z_ext_tolerance >= 0, "z_ext_tolerance", "must be >= 0"),
            (self.budget_bonus_coeff >= 0, "budget_bonus_coeff", "must be >= 0"),
            (self.z_optimizer in Z_OPTIMIZERS, "z_optimizer", f"one of {Z_OPTIMIZERS}"),
            (
                self.z_ext_scale is None or self.z_ext_scale > 0,
                "z_ext_scale",
                "must be > 0 or null",
            ),
            (
                self.efx_advantage in EFX_ADVANTAGE_FORMS,
                "efx_advantage",
                f"one of {EFX_ADVANTAGE_FORMS}",
            ),
            (self.efx_kappa > 0, "efx_kappa", "must be > 0"),
            (self.budget_range in BUDGET_RANGES, "budget_range", f"one of {BUDGET_RANGES}"),
            (
                self.push_gradient in PUSH_GRADIENTS,
                "push_gradient",
                f"one of {PUSH_GRADIENTS}",
            ),
            (self.push_scale in PUSH_SCALES, "push_scale", f"one of {PUSH_SCALES}"),
            (self.push_credit in PUSH_CREDITS, "push_credit", f"one of {PUSH_CREDITS}"),
            (
                self.push_gradient == "policy" or self.budget_temperature,
                "push_gradient",
                "temperature trains the budget temperature's network: it needs "
                "budget_temperature: true (with budget_temperature: false, set "
                "push_gradient: policy)",
            ),
            (
                self.intrinsic_reward in INTRINSIC_SIGNALS,
                "intrinsic_reward",
                f"one of {INTRINSIC_SIGNALS}",
            ),
            (
                self.gaussian_entropy_per_dim is None or self.gaussian_entropy_per_dim > 0,
                "gaussian_entropy_per_dim",
                "must be > 0 (or null for the initial policy's)",
            ),
            (
                self.z_low is None or self.z_high is None or self.z_low <= self.z_high,
                "z_low",
                f"must not exceed z_high = {self.z_high}",
            ),
            (
                self.evaluation_budget is None
                or self.z_low is None
                or self.z_high is None
                or self.z_low <= self.evaluation_budget <= self.z_high,
                "evaluation_budget",
                f"must be within [z_low, z_high] = [{self.z_low}, {self.z_high}] (or null)",
            ),
        ]


@dataclass(frozen=True)
class EFXSettings(CentralCriticSettings, EFXFields):
    """``efx_mappo``: MAPPO settings plus the budget."""


@dataclass(frozen=True)
class EFXTrustRegionSettings(CentralCriticSettings, TrustRegionFields, EFXFields):
    """``efx_hatrpo``: HATRPO settings plus the budget."""


@dataclass(frozen=True)
class EFXVDSettings(VDSettings, EFXFields):
    """``efx_vdppo``: VDPPO settings plus the budget."""
