"""EFXplorer conservative exploration on the joint-critic pipelines (``efx_mappo``,
``efx_vdppo``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.columns import Columns

from marllib_ext.algos.config import CentralCriticSettings, VDSettings
from marllib_ext.algos.efx_budget import Z_BOUNDS_MODES, budget_bounds, extrinsic_scale
from marllib_ext.algos.learners import JointCriticPPOLearner
from marllib_ext.algos.ppo_family import build_mappo, build_vdppo
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.ops.efx import EFX_ADVANTAGE_FORMS, Z_SAMPLING_MODES, BudgetController
from marllib_ext.postprocessing.budget import DEPLOY_KEY, BudgetObservationConnector
from marllib_ext.postprocessing.budget_input import BudgetInput
from marllib_ext.postprocessing.efx_advantage import EFXJointAdvantageConnector
from marllib_ext.postprocessing.episode_sums import sum_over_env_steps
from marllib_ext.postprocessing.vd_advantage import VDJointAdvantageConnector

EFX_CONFIG_KEY = "efx"
# Per-iteration sums logged by env runners at episode end.
TEAM_EXTRINSIC_RETURN_SUM = "efx_team_extrinsic_return_sum"
TEAM_INTRINSIC_RETURN_SUM = "efx_team_intrinsic_return_sum"
EPISODES_DONE = "efx_episodes_done"
# The same for the episodes played at the controller's (deployment) budget.
DEPLOY_EXTRINSIC_RETURN_SUM = "efx_deploy_extrinsic_return_sum"
DEPLOY_INTRINSIC_RETURN_SUM = "efx_deploy_intrinsic_return_sum"
DEPLOY_EPISODES_DONE = "efx_deploy_episodes_done"
# Smoothed over the last 100 episodes, for display.
TEAM_INTRINSIC_RETURN_MEAN = "efx_team_intrinsic_return_mean"
RESULT_KEY = "efx"


@dataclass(frozen=True)
class EFXFields:
    """The EFXplorer budget settings (seed 000), mixed into a joint-critic settings class."""

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
    efx_advantage: str
    efx_kappa: float

    def __post_init__(self) -> None:
        super().__post_init__()  # the joint-critic settings' checks (cooperative MRO)
        if self.intrinsic_coef < 0:
            raise ConfigError(f"config key 'intrinsic_coef' = {self.intrinsic_coef}: must be >= 0")
        if self.z_bounds not in Z_BOUNDS_MODES:
            raise ConfigError(f"config key 'z_bounds' = {self.z_bounds!r}: one of {Z_BOUNDS_MODES}")
        if self.z_sampling not in Z_SAMPLING_MODES:
            raise ConfigError(
                f"config key 'z_sampling' = {self.z_sampling!r}: one of {Z_SAMPLING_MODES}"
            )
        if not 0.0 <= self.z_deploy_fraction <= 1.0:
            raise ConfigError(
                f"config key 'z_deploy_fraction' = {self.z_deploy_fraction}: must be in [0, 1]"
            )
        if self.z_sampling != "fixed" and self.z_deploy_fraction == 0.0:
            raise ConfigError(
                "config key 'z_deploy_fraction' = 0.0: the outer loop needs episodes at the "
                "deployment budget (use > 0, or z_sampling: fixed)"
            )
        if self.lr_z < 0:
            raise ConfigError(f"config key 'lr_z' = {self.lr_z}: must be >= 0")
        if self.z_optimizer not in ("sgd", "adam"):
            raise ConfigError(f"config key 'z_optimizer' = {self.z_optimizer!r}: sgd or adam")
        if self.efx_advantage not in EFX_ADVANTAGE_FORMS:
            raise ConfigError(
                f"config key 'efx_advantage' = {self.efx_advantage!r}: one of {EFX_ADVANTAGE_FORMS}"
            )
        if self.efx_kappa <= 0:
            raise ConfigError(f"config key 'efx_kappa' = {self.efx_kappa}: must be > 0")
        if self.gaussian_entropy_per_dim is not None and self.gaussian_entropy_per_dim <= 0:
            raise ConfigError(
                f"config key 'gaussian_entropy_per_dim' = {self.gaussian_entropy_per_dim}: "
                "must be > 0 (or null for the initial policy's)"
            )
        if self.z_low is not None and self.z_high is not None and self.z_low > self.z_high:
            raise ConfigError(f"config key 'z_low' = {self.z_low} exceeds z_high = {self.z_high}")


@dataclass(frozen=True)
class EFXSettings(EFXFields, CentralCriticSettings):
    """``efx_mappo``: MAPPO settings plus the budget."""


@dataclass(frozen=True)
class EFXVDSettings(EFXFields, VDSettings):
    """``efx_vdppo``: VDPPO settings plus the budget."""


class EFXJointCriticLearner(JointCriticPPOLearner):
    """MAPPO learner whose advantage connector applies the conservative advantage."""

    advantage_connector_class = EFXJointAdvantageConnector

    def advantage_connector_kwargs(self) -> dict[str, Any]:
        efx = self.config.learner_config_dict[EFX_CONFIG_KEY]
        return {
            **super().advantage_connector_kwargs(),
            "intrinsic_coef": efx["intrinsic_coef"],
            "z_low": efx["z_low"],
            "z_high": efx["z_high"],
            "advantage_form": efx["efx_advantage"],
            "kappa": efx["efx_kappa"],
        }


class EFXVDJointAdvantageConnector(EFXJointAdvantageConnector, VDJointAdvantageConnector):
    """Conservative advantage on ``A_ext`` from ``V_tot``; mixer inputs carry z."""


class EFXVDLearner(EFXJointCriticLearner):
    """VDPPO learner with the conservative advantage."""

    advantage_connector_class = EFXVDJointAdvantageConnector


def _chunk_team_logp(chunk) -> np.ndarray:
    """``sum_i log pi_i`` per env step of one chunk (every agent acts at every step)."""
    per_agent = [
        np.asarray(agent_episode.get_extra_model_outputs(Columns.ACTION_LOGP), np.float64)
        for agent_episode in chunk.agent_episodes.values()
        if len(agent_episode) > 0
    ]
    if not per_agent:
        return np.zeros(0)
    steps = max(len(logp) for logp in per_agent)
    total = np.zeros(steps)
    for logp in per_agent:
        total[: len(logp)] += logp
    return total


def episode_team_logp(chunks) -> float:
    """``sum_t sum_i log pi_i`` over a finished episode's chunks."""
    return sum_over_env_steps(chunks, _chunk_team_logp)


def log_episode_returns(
    *, episode, prev_episode_chunks=None, env_runner=None, metrics_logger=None, **kwargs
) -> None:
    """``on_episode_end``: the episode's team extrinsic and intrinsic returns, summed
    separately for the episodes played at the deployment budget."""
    coef = env_runner.config.learner_config_dict[EFX_CONFIG_KEY]["intrinsic_coef"]
    chunks = [*(prev_episode_chunks or []), episode]
    intrinsic = -coef * episode_team_logp(chunks)
    extrinsic = float(sum(chunk.get_return() for chunk in chunks))
    metrics_logger.log_value(TEAM_EXTRINSIC_RETURN_SUM, extrinsic, reduce="sum")
    metrics_logger.log_value(TEAM_INTRINSIC_RETURN_SUM, intrinsic, reduce="sum")
    metrics_logger.log_value(EPISODES_DONE, 1, reduce="sum")
    metrics_logger.log_value(TEAM_INTRINSIC_RETURN_MEAN, intrinsic, window=100)
    if episode.custom_data.get(DEPLOY_KEY, False):
        metrics_logger.log_value(DEPLOY_EXTRINSIC_RETURN_SUM, extrinsic, reduce="sum")
        metrics_logger.log_value(DEPLOY_INTRINSIC_RETURN_SUM, intrinsic, reduce="sum")
        metrics_logger.log_value(DEPLOY_EPISODES_DONE, 1, reduce="sum")


def budget_connector(env_runner) -> BudgetObservationConnector | None:
    pipeline = getattr(env_runner, "_env_to_module", None)
    if pipeline is None:
        return None
    found = pipeline[BudgetObservationConnector]
    return found[0] if found else None


def _get_controller_state(env_runner):
    connector = budget_connector(env_runner)
    return None if connector is None else connector.controller.get_state()


def _set_controller_state(env_runner, state):
    connector = budget_connector(env_runner)
    if connector is not None:
        connector.controller.set_state(state)


def _set_learner_budget(learner, z):
    for connector in learner._learner_connector[EFXJointAdvantageConnector]:
        connector.budget = z


def _count(stats: dict, key: str) -> int:
    """An iteration's episode count (RLlib reports NaN for a sum nobody logged)."""
    count = stats.get(key, 0)
    return int(count) if count is not None and np.isfinite(count) else 0


def _mean(stats: dict, total_key: str, count_key: str) -> float:
    count = _count(stats, count_key)
    return stats.get(total_key, math.nan) / count if count > 0 else math.nan


def update_budget(*, algorithm, result: dict, **kwargs) -> None:
    """``on_train_result``: one outer-loop step on the deployment budget z, from this
    iteration's episodes played at that budget; broadcast to runners and learners."""
    efx = algorithm.config.learner_config_dict[EFX_CONFIG_KEY]
    runners = algorithm.env_runner_group
    states = [s for s in runners.foreach_env_runner(_get_controller_state) if s]
    if not states:
        return
    controller = BudgetController(
        z=efx["z_init"],
        z_low=efx["z_low"],
        z_high=efx["z_high"],
        lr=efx["lr_z"],
        optimizer=efx["z_optimizer"],
        ext_scale=efx["ext_scale"],
    )
    controller.set_state(states[0])
    stats = result.get("env_runners", {})
    j_ext = _mean(stats, DEPLOY_EXTRINSIC_RETURN_SUM, DEPLOY_EPISODES_DONE)
    j_int = _mean(stats, DEPLOY_INTRINSIC_RETURN_SUM, DEPLOY_EPISODES_DONE)
    budget_played = controller.z
    slack = controller.update(j_ext, j_int) if np.isfinite(j_ext) else None
    state = controller.get_state()
    runners.foreach_env_runner(
        functools.partial(_set_controller_state, state=state), local_env_runner=True
    )
    algorithm.learner_group.foreach_learner(functools.partial(_set_learner_budget, z=state["z"]))
    result[RESULT_KEY] = {
        "budget_z": state["z"],
        "budget_z_played": budget_played,
        "slack": math.nan if slack is None else slack,
        "deploy_episodes": _count(stats, DEPLOY_EPISODES_DONE),
        # At the deployment budget (what the team delivers) ...
        "team_extrinsic_return_mean": j_ext,
        "team_intrinsic_return_mean": j_int,
        # ... and over every episode of the sampled-z training mixture.
        "mixture_extrinsic_return_mean": _mean(stats, TEAM_EXTRINSIC_RETURN_SUM, EPISODES_DONE),
        "mixture_intrinsic_return_mean": _mean(stats, TEAM_INTRINSIC_RETURN_SUM, EPISODES_DONE),
    }


# The env-runner side of the settings (the rest is the learner's).
RUNNER_KEYS = (
    "intrinsic_coef",
    "z_init",
    "z_low",
    "z_high",
    "lr_z",
    "z_optimizer",
    "z_sampling",
    "z_deploy_fraction",
    "ext_scale",
)


def _budget_connector_factory(env, spaces, device, *, kwargs):
    return [BudgetObservationConnector(**kwargs)]


def _with_budget(
    base_builder, learner_class: type[JointCriticPPOLearner], name: str
) -> Callable[..., PPOConfig]:
    """A registry builder: ``base_builder`` + z-conditioned actors + budget outer loop."""

    def build(
        settings: EFXFields, env: EnvHandle, share_policy: str, seed: int | None
    ) -> PPOConfig:
        if not env.is_multi_agent:
            raise ConfigError(f"{env.name!r} is a single-agent env; {name} is multi-agent")
        z_low, z_high, z_init = budget_bounds(settings, env)
        efx = {
            "intrinsic_coef": settings.intrinsic_coef,
            "lr_z": settings.lr_z,
            "z_init": z_init,
            "z_low": z_low,
            "z_high": z_high,
            "z_sampling": settings.z_sampling,
            "z_deploy_fraction": settings.z_deploy_fraction,
            "z_optimizer": settings.z_optimizer,
            "ext_scale": extrinsic_scale(env),
            "efx_advantage": settings.efx_advantage,
            "efx_kappa": settings.efx_kappa,
        }
        config = base_builder(
            settings,
            env,
            share_policy,
            seed,
            learner_class=learner_class,
            extra_inputs=BudgetInput.extra_inputs(),
        )
        return (
            config.env_runners(
                env_to_module_connector=functools.partial(
                    _budget_connector_factory,
                    kwargs={**{k: efx[k] for k in RUNNER_KEYS}, "seed": seed},
                )
            )
            .learners(learner_config_dict={EFX_CONFIG_KEY: efx})
            .callbacks(on_episode_end=log_episode_returns, on_train_result=update_budget)
        )

    build.__doc__ = f"{name}: {base_builder.__doc__}"
    return build


# The joint critic sees the budget too: V(s, z) for MAPPO, V_i(o_i, z) mixed on (s, z)
# for VDPPO (extra_inputs=1).
build_efx_mappo = _with_budget(build_mappo, EFXJointCriticLearner, "efx_mappo")
build_efx_vdppo = _with_budget(build_vdppo, EFXVDLearner, "efx_vdppo")
