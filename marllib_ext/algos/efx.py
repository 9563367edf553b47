"""EFXplorer conservative exploration on the joint-critic pipelines (``efx_mappo``,
``efx_vdppo``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.columns import Columns

from marllib_ext.algos.config import CentralCriticSettings, VDSettings
from marllib_ext.algos.learners import JointCriticPPOLearner
from marllib_ext.algos.ppo_family import build_mappo, build_vdppo
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.ops.efx import (
    EFX_ADVANTAGE_FORMS,
    GAUSSIAN_ENTROPY_UNIT_STD,
    Z_SAMPLING_MODES,
    BudgetController,
    intrinsic_budget_bound,
    max_action_entropy,
)
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


Z_BOUNDS_MODES = ("intrinsic", "reward")


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


def intrinsic_z_max(settings: EFXFields, env: EnvHandle) -> float:
    """``Z_max = c * T_max * sum_i H_max(i)`` for ``env`` at its env arguments."""
    t_max = env.spec.episode_limit(env.env_args)
    if t_max is None:
        raise ConfigError(
            f"env {env.name!r} declares no max_episode_steps, which z_bounds: intrinsic "
            "needs (register_env(..., max_episode_steps=...)); or set z_low and z_high"
        )
    layout = env.layout
    entropies = [
        action_entropy_bound(
            layout.action_spaces[agent],
            agent=agent,
            entropy_per_dim=settings.gaussian_entropy_per_dim,
        )
        for agent in layout.agents
    ]
    return intrinsic_budget_bound(
        coef=settings.intrinsic_coef, max_episode_steps=t_max, max_entropies=entropies
    )


def budget_bounds(settings: EFXFields, env: EnvHandle) -> tuple[float, float, float]:
    """``(z_low, z_high, z_init)``. Unset bounds come from ``z_bounds``: ``intrinsic``
    gives ``[0, Z_max]``; ``reward`` gives ``[-R_max, -R_min]`` from the env's declared
    team return range (seed 000 read literally). ``z_init`` defaults to ``z_low``."""
    z_low, z_high = settings.z_low, settings.z_high
    if z_low is None or z_high is None:
        if settings.z_bounds == "intrinsic":
            default_low, default_high = 0.0, intrinsic_z_max(settings, env)
        else:
            reward_range = env.spec.reward_range
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
