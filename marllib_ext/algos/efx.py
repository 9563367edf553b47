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
from marllib_ext.algos.learners import JointCriticPPOLearner
from marllib_ext.algos.ppo_family import build_mappo, build_vdppo
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.ops.efx import Z_SAMPLING_MODES, BudgetController
from marllib_ext.postprocessing.budget import BudgetObservationConnector
from marllib_ext.postprocessing.efx_advantage import EFXJointAdvantageConnector
from marllib_ext.postprocessing.episode_sums import sum_over_env_steps
from marllib_ext.postprocessing.vd_advantage import VDJointAdvantageConnector

EFX_CONFIG_KEY = "efx"
# Per-iteration sums logged by env runners at episode end.
TEAM_EXTRINSIC_RETURN_SUM = "efx_team_extrinsic_return_sum"
TEAM_INTRINSIC_RETURN_SUM = "efx_team_intrinsic_return_sum"
EPISODES_DONE = "efx_episodes_done"
# Smoothed over the last 100 episodes, for display.
TEAM_INTRINSIC_RETURN_MEAN = "efx_team_intrinsic_return_mean"
RESULT_KEY = "efx"


@dataclass(frozen=True)
class EFXFields:
    """The EFXplorer budget settings (seed 000), mixed into a joint-critic settings class."""

    intrinsic_coef: float
    lr_z: float
    z_init: float | None
    z_low: float | None
    z_high: float | None
    z_sampling: str
    z_optimizer: str

    def __post_init__(self) -> None:
        super().__post_init__()  # the joint-critic settings' checks (cooperative MRO)
        if self.intrinsic_coef < 0:
            raise ConfigError(f"config key 'intrinsic_coef' = {self.intrinsic_coef}: must be >= 0")
        if self.z_sampling not in Z_SAMPLING_MODES:
            raise ConfigError(
                f"config key 'z_sampling' = {self.z_sampling!r}: one of {Z_SAMPLING_MODES}"
            )
        if self.z_optimizer not in ("sgd", "adam"):
            raise ConfigError(f"config key 'z_optimizer' = {self.z_optimizer!r}: sgd or adam")
        if self.z_low is not None and self.z_high is not None and self.z_low > self.z_high:
            raise ConfigError(f"config key 'z_low' = {self.z_low} exceeds z_high = {self.z_high}")


@dataclass(frozen=True)
class EFXSettings(EFXFields, CentralCriticSettings):
    """``efx_mappo``: MAPPO settings plus the budget."""


@dataclass(frozen=True)
class EFXVDSettings(EFXFields, VDSettings):
    """``efx_vdppo``: VDPPO settings plus the budget."""


def budget_bounds(settings: EFXFields, env: EnvHandle) -> tuple[float, float, float]:
    """``(z_low, z_high, z_init)``; unset bounds come from the env's declared team
    return range ``[R_min, R_max]`` as ``[-R_max, -R_min]`` (seed 000)."""
    z_low, z_high = settings.z_low, settings.z_high
    if z_low is None or z_high is None:
        reward_range = env.spec.reward_range
        if reward_range is None:
            raise ConfigError(
                f"env {env.name!r} declares no reward_range; set z_low and z_high "
                "explicitly (e.g. --set z_low=-10 --set z_high=0)"
            )
        r_min, r_max = reward_range
        z_low = -r_max if z_low is None else z_low
        z_high = -r_min if z_high is None else z_high
    if z_low > z_high:
        raise ConfigError(f"budget bounds z_low={z_low} > z_high={z_high}")
    z_init = z_low if settings.z_init is None else settings.z_init
    if not z_low <= z_init <= z_high:
        raise ConfigError(f"config key 'z_init' = {z_init} is outside [{z_low}, {z_high}]")
    # + 0.0 turns -0.0 (from -R_min = -0) into 0.0 for display.
    return float(z_low) + 0.0, float(z_high) + 0.0, float(z_init) + 0.0


class EFXJointCriticLearner(JointCriticPPOLearner):
    """MAPPO learner whose advantage connector applies the conservative advantage."""

    advantage_connector_class = EFXJointAdvantageConnector

    def advantage_connector_kwargs(self) -> dict[str, Any]:
        efx = self.config.learner_config_dict[EFX_CONFIG_KEY]
        return {**super().advantage_connector_kwargs(), "intrinsic_coef": efx["intrinsic_coef"]}


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


def _episode_logp_sum(chunks) -> float:
    return sum_over_env_steps(chunks, _chunk_team_logp)


def log_episode_returns(
    *, episode, prev_episode_chunks=None, env_runner=None, metrics_logger=None, **kwargs
) -> None:
    """``on_episode_end``: the episode's team extrinsic and intrinsic returns."""
    coef = env_runner.config.learner_config_dict[EFX_CONFIG_KEY]["intrinsic_coef"]
    chunks = [*(prev_episode_chunks or []), episode]
    intrinsic = -coef * _episode_logp_sum(chunks)
    extrinsic = float(sum(chunk.get_return() for chunk in chunks))
    metrics_logger.log_value(TEAM_EXTRINSIC_RETURN_SUM, extrinsic, reduce="sum")
    metrics_logger.log_value(TEAM_INTRINSIC_RETURN_SUM, intrinsic, reduce="sum")
    metrics_logger.log_value(EPISODES_DONE, 1, reduce="sum")
    metrics_logger.log_value(TEAM_INTRINSIC_RETURN_MEAN, intrinsic, window=100)


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


def update_budget(*, algorithm, result: dict, **kwargs) -> None:
    """``on_train_result``: one outer-loop step on z, broadcast to runners and learners."""
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
    )
    controller.set_state(states[0])
    stats = result.get("env_runners", {})
    episodes = stats.get(EPISODES_DONE, 0) or 0
    slack = None
    j_ext = j_int = math.nan
    if episodes > 0:
        j_ext = stats[TEAM_EXTRINSIC_RETURN_SUM] / episodes
        j_int = stats[TEAM_INTRINSIC_RETURN_SUM] / episodes
        slack = controller.update(j_ext, j_int)
    state = controller.get_state()
    runners.foreach_env_runner(
        functools.partial(_set_controller_state, state=state), local_env_runner=True
    )
    algorithm.learner_group.foreach_learner(functools.partial(_set_learner_budget, z=state["z"]))
    result[RESULT_KEY] = {
        "budget_z": state["z"],
        "slack": math.nan if slack is None else slack,
        "team_extrinsic_return_mean": j_ext,
        "team_intrinsic_return_mean": j_int,
    }


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
            "z_optimizer": settings.z_optimizer,
        }
        config = base_builder(
            settings, env, share_policy, seed, learner_class=learner_class, extra_inputs=1
        )
        return (
            config.env_runners(
                env_to_module_connector=functools.partial(
                    _budget_connector_factory, kwargs={**efx, "seed": seed}
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
