"""Safe-MARL baselines on the MAPPO pipeline (seed 004: SafePO's projection methods).

All four share :class:`SafeJointCriticLearner`: a central critic with a cost head,
cost GAE in the joint-advantage connector and a Lagrange multiplier updated once per
iteration from the mean team episode cost (an ``on_train_result`` callback; the new
``lam`` is used from the next iteration's update on). Each algorithm overrides one
hook:

- ``mappo_lag``: none -- Adam multiplier, actors on ``(A_r - lam*A_c)/(1+lam)``;
- ``mappo_pid_lag``: :meth:`make_multiplier` (PID controller);
- ``mappo_focops``: :meth:`actor_loss` (FOCOPS loss on the Lagrangian advantage);
- ``mappo_cup``: :meth:`actor_loss` for its two stages (PPO on ``A_r``, then a
  projection on ``A_c`` with the KL to the post-step-1 policy; :meth:`update` runs
  the two passes).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from marllib_ext.algos.config import CentralCriticSettings, require
from marllib_ext.algos.learners import JointCriticPPOLearner, masked_value_loss
from marllib_ext.algos.ppo_family import build_joint_critic_ppo, central_critic_spec
from marllib_ext.envs.adapter import TEAM_COST_KEY
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.ops.lagrange import (
    Lagrange,
    PIDLagrangian,
    cup_coefficient,
    cup_projection_loss,
    focops_loss,
)
from marllib_ext.policies.joint_critic import CRITIC_MODULE_ID
from marllib_ext.postprocessing.cost_advantage import (
    COST_ADVANTAGES,
    COST_VALUE_TARGETS,
    CostJointAdvantageConnector,
)
from marllib_ext.postprocessing.episode_sums import sum_over_env_steps

SAFE_CONFIG_KEY = "safe"
RESULT_KEY = "safe"
# Per-iteration sums logged by env runners at episode end.
EPISODE_COST_SUM = "safe_episode_cost_sum"
COST_EPISODES_DONE = "safe_episodes_done"
# Smoothed over the last 100 episodes, for display.
EPISODE_COST_MEAN = "episode_cost_mean"
MULTIPLIER_STATE_KEY = "cost_multiplier"
COST_MULTIPLIER = "cost_multiplier"
CUP_REFERENCE_DIST_INPUTS = "cup_reference_action_dist_inputs"


@dataclass(frozen=True)
class CostFields:
    """The cost constraint: mean team episode cost <= ``cost_limit``."""

    cost_limit: float
    lagrangian_multiplier_init: float

    def __post_init__(self) -> None:
        super().__post_init__()  # the joint-critic settings' checks (cooperative MRO)
        require(self.cost_limit >= 0, "cost_limit", self.cost_limit, "must be >= 0")
        require(
            self.lagrangian_multiplier_init >= 0,
            "lagrangian_multiplier_init",
            self.lagrangian_multiplier_init,
            "must be >= 0",
        )


@dataclass(frozen=True)
class LagrangeFields(CostFields):
    """Adam-updated multiplier (SafePO's ``Lagrange``)."""

    lagrangian_multiplier_lr: float
    lagrangian_upper_bound: float | None

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.lagrangian_multiplier_lr > 0,
            "lagrangian_multiplier_lr",
            self.lagrangian_multiplier_lr,
            "must be > 0",
        )
        require(
            self.lagrangian_upper_bound is None or self.lagrangian_upper_bound >= 0,
            "lagrangian_upper_bound",
            self.lagrangian_upper_bound,
            "must be >= 0 or null",
        )


@dataclass(frozen=True)
class LagSettings(LagrangeFields, CentralCriticSettings):
    """``mappo_lag``."""


@dataclass(frozen=True)
class PIDLagSettings(CostFields, CentralCriticSettings):
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

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("pid_kp", "pid_ki", "pid_kd"):
            require(getattr(self, key) >= 0, key, getattr(self, key), "must be >= 0")
        require(self.pid_d_delay >= 1, "pid_d_delay", self.pid_d_delay, "must be >= 1")
        for key in ("pid_delta_p_ema_alpha", "pid_delta_d_ema_alpha"):
            require(0 <= getattr(self, key) < 1, key, getattr(self, key), "must be in [0, 1)")


@dataclass(frozen=True)
class CUPSettings(LagrangeFields, CentralCriticSettings):
    """``mappo_cup``: ``cup_lambda`` is the GAE lambda in CUP's projection weight."""

    cup_lambda: float

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.cup_lambda <= 1, "cup_lambda", self.cup_lambda, "must be in [0, 1]")
        require(self.gamma < 1, "gamma", self.gamma, "CUP needs gamma < 1")


@dataclass(frozen=True)
class FOCOPSSettings(LagrangeFields, CentralCriticSettings):
    """``mappo_focops``: temperature ``focops_lam`` and KL radius ``focops_eta``."""

    focops_lam: float
    focops_eta: float

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.focops_lam > 0, "focops_lam", self.focops_lam, "must be > 0")
        require(self.focops_eta > 0, "focops_eta", self.focops_eta, "must be > 0")


_SAFE_FIELD_NAMES = {
    f.name
    for cls in (LagrangeFields, PIDLagSettings, CUPSettings, FOCOPSSettings)
    for f in fields(cls)
    if f.name not in {g.name for g in fields(CentralCriticSettings)}
}


def _masked_mean(batch) -> Any:
    if Columns.LOSS_MASK in batch:
        mask = batch[Columns.LOSS_MASK]
        count = torch.sum(mask)
        return lambda values: torch.sum(values[mask]) / count
    return torch.mean


class SafeJointCriticLearner(JointCriticPPOLearner):
    """MAPPO learner with a cost critic, cost GAE and a cost multiplier (``mappo_lag``).

    The multiplier lives here and in checkpoints (``get_state``); the advantage
    connector reads its current value.
    """

    advantage_connector_class = CostJointAdvantageConnector
    advantage_mode = "lagrangian"

    @property
    def safe_config(self) -> dict[str, Any]:
        return self.config.learner_config_dict[SAFE_CONFIG_KEY]

    def build(self) -> None:
        super().build()
        self.multiplier = self.make_multiplier()
        self._sync_multiplier()

    def make_multiplier(self) -> Lagrange | PIDLagrangian:
        """The cost multiplier: Adam on ``-lam * (J_c - d)`` (SafePO's ``Lagrange``)."""
        safe = self.safe_config
        return Lagrange(
            cost_limit=safe["cost_limit"],
            init=safe["lagrangian_multiplier_init"],
            lr=safe["lagrangian_multiplier_lr"],
            upper_bound=safe["lagrangian_upper_bound"],
        )

    def advantage_connector_kwargs(self) -> dict[str, Any]:
        return {**super().advantage_connector_kwargs(), "advantage_mode": self.advantage_mode}

    def update_cost_multiplier(self, mean_episode_cost: float) -> float:
        """One multiplier step from the iteration's mean team episode cost."""
        value = self.multiplier.update(mean_episode_cost)
        self._sync_multiplier()
        return value

    def _sync_multiplier(self) -> None:
        for connector in self._learner_connector[CostJointAdvantageConnector]:
            connector.cost_multiplier = self.multiplier.multiplier

    def critic_loss(self, *, module_id, config, batch) -> torch.Tensor:
        loss = super().critic_loss(module_id=module_id, config=config, batch=batch)
        critic = self.module[module_id].unwrapped()
        cost_loss, explained = masked_value_loss(
            critic.compute_cost_values(batch), batch[COST_VALUE_TARGETS], batch[Columns.LOSS_MASK]
        )
        self.metrics.log_dict(
            {
                "cost_vf_loss": cost_loss,
                "cost_vf_explained_var": explained,
                COST_MULTIPLIER: self.multiplier.multiplier,
            },
            key=module_id,
            window=1,
        )
        return loss + config.vf_loss_coeff * cost_loss

    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(MULTIPLIER_STATE_KEY, components, not_components):
            state[MULTIPLIER_STATE_KEY] = self.multiplier.get_state()
        return state

    def set_state(self, state) -> None:
        if MULTIPLIER_STATE_KEY in state:
            self.multiplier.set_state(state[MULTIPLIER_STATE_KEY])
            self._sync_multiplier()
        super().set_state({k: v for k, v in state.items() if k != MULTIPLIER_STATE_KEY})


class PIDLagLearner(SafeJointCriticLearner):
    """``mappo_pid_lag``: the multiplier is a PID controller on the cost error."""

    def make_multiplier(self) -> PIDLagrangian:
        safe = self.safe_config
        return PIDLagrangian(
            cost_limit=safe["cost_limit"],
            kp=safe["pid_kp"],
            ki=safe["pid_ki"],
            kd=safe["pid_kd"],
            d_delay=safe["pid_d_delay"],
            delta_p_ema_alpha=safe["pid_delta_p_ema_alpha"],
            delta_d_ema_alpha=safe["pid_delta_d_ema_alpha"],
            sum_norm=safe["pid_sum_norm"],
            diff_norm=safe["pid_diff_norm"],
            penalty_max=safe["pid_penalty_max"],
            init=safe["lagrangian_multiplier_init"],
        )


def _ratio_and_kl(module, batch, fwd_out, reference_dist_inputs):
    """``pi/pi_behaviour`` of the sampled actions, and per-sample ``KL(pi || pi_ref)``."""
    dist_class = module.get_train_action_dist_cls()
    current = dist_class.from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
    reference = dist_class.from_logits(reference_dist_inputs)
    ratio = torch.exp(current.logp(batch[Columns.ACTIONS]) - batch[Columns.ACTION_LOGP])
    return ratio, current.kl(reference), current.entropy()


class FOCOPSLearner(SafeJointCriticLearner):
    """``mappo_focops``: ``(KL(pi||pi_old) - ratio*A/focops_lam) * 1[KL <= focops_eta]``
    on the Lagrangian advantage, minus the entropy bonus; ``pi_old`` is the sampling
    policy."""

    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        module = self.module[module_id].unwrapped()
        ratio, kl, entropy = _ratio_and_kl(
            module, batch, fwd_out, batch[Columns.ACTION_DIST_INPUTS]
        )
        safe = self.safe_config
        per_sample = focops_loss(
            ratio,
            batch[Columns.ADVANTAGES],
            kl,
            focops_lam=safe["focops_lam"],
            focops_eta=safe["focops_eta"],
        )
        mean = _masked_mean(batch)
        entropy_coeff = self.entropy_coeff_schedulers_per_module[module_id].get_current_value()
        self.metrics.log_dict(
            {
                POLICY_LOSS_KEY: mean(per_sample),
                "focops_kl": mean(kl),
                "focops_inside_fraction": mean((kl.detach() <= safe["focops_eta"]).float()),
                "entropy": mean(entropy),
            },
            key=module_id,
            window=1,
        )
        return mean(per_sample - entropy_coeff * entropy)


class CUPLearner(SafeJointCriticLearner):
    """``mappo_cup``: each update is PPO on ``A_r`` (actors and critic), then a
    projection pass over the same batch (actors only) minimizing
    ``lam * coef * ratio * A_c + KL(pi || pi_after_step_1)``,
    ``coef = (1 - gamma * cup_lambda) / (1 - gamma)``."""

    advantage_mode = "reward"
    _projecting = False

    def build(self) -> None:
        super().build()
        self.cup_coefficient = cup_coefficient(self.config.gamma, self.safe_config["cup_lambda"])

    def _make_batch_if_necessary(self, training_data):
        batch = super()._make_batch_if_necessary(training_data)
        self._last_train_batch = batch
        return batch

    def update(self, *args, training_data=None, timesteps=None, **kwargs):
        self._projecting = False
        super().update(
            *args,
            training_data=training_data,
            timesteps=timesteps,
            _no_metrics_reduce=True,
            **kwargs,
        )
        projection = self._projection_batch(self._last_train_batch)
        self._last_train_batch = None
        self._projecting = True
        try:
            return super().update(
                training_data=TrainingData(batch=projection), timesteps=timesteps, **kwargs
            )
        finally:
            self._projecting = False

    def _projection_batch(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        """The actors' rows plus the post-step-1 policy's action-distribution inputs."""
        columns = (
            Columns.OBS,
            Columns.ACTIONS,
            Columns.ACTION_LOGP,
            COST_ADVANTAGES,
            Columns.LOSS_MASK,
        )
        policy_batches = {}
        for module_id, module_batch in batch.policy_batches.items():
            if module_id == CRITIC_MODULE_ID:
                continue
            data = {c: module_batch[c] for c in columns if c in module_batch}
            with torch.no_grad():
                out = self.module[module_id].forward_train(dict(data))
            data[CUP_REFERENCE_DIST_INPUTS] = out[Columns.ACTION_DIST_INPUTS].detach()
            policy_batches[module_id] = SampleBatch(data)
        return MultiAgentBatch(policy_batches, env_steps=batch.env_steps())

    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        if not self._projecting:
            return super().actor_loss(
                module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
            )
        module = self.module[module_id].unwrapped()
        ratio, kl, _ = _ratio_and_kl(module, batch, fwd_out, batch[CUP_REFERENCE_DIST_INPUTS])
        per_sample = cup_projection_loss(
            ratio,
            batch[COST_ADVANTAGES],
            kl,
            multiplier=self.multiplier.multiplier,
            coefficient=self.cup_coefficient,
        )
        mean = _masked_mean(batch)
        self.metrics.log_dict(
            {"cup_projection_loss": mean(per_sample), "cup_projection_kl": mean(kl)},
            key=module_id,
            window=1,
        )
        return mean(per_sample)


# ---- env-runner and algorithm callbacks -------------------------------------------------
def _chunk_team_costs(chunk) -> list[float]:
    # Info k + 1 arrives with the observation after step k; team_cost is the same in
    # every agent's info.
    agent_episode = next(iter(chunk.agent_episodes.values()))
    return [float(info.get(TEAM_COST_KEY, 0.0)) for info in agent_episode.get_infos()[1:]]


def episode_team_cost(chunks) -> float:
    """Team cost of an episode (sum over agents and env steps) from its chunks."""
    return sum_over_env_steps(chunks, _chunk_team_costs)


def log_episode_cost(*, episode, prev_episode_chunks=None, metrics_logger=None, **kwargs) -> None:
    """``on_episode_end``: the episode's team cost (sum over agents and steps)."""
    cost = episode_team_cost([*(prev_episode_chunks or []), episode])
    metrics_logger.log_value(EPISODE_COST_SUM, cost, reduce="sum")
    metrics_logger.log_value(COST_EPISODES_DONE, 1, reduce="sum")
    metrics_logger.log_value(EPISODE_COST_MEAN, cost, window=100)


def update_cost_multiplier(*, algorithm, result: dict, **kwargs) -> None:
    """``on_train_result``: one multiplier step from this iteration's mean episode cost."""
    safe = algorithm.config.learner_config_dict[SAFE_CONFIG_KEY]
    stats = result.get("env_runners", {})
    episodes = stats.get(COST_EPISODES_DONE, 0) or 0
    mean_cost = math.nan
    if episodes > 0:
        mean_cost = stats[EPISODE_COST_SUM] / episodes
        values = algorithm.learner_group.foreach_learner(
            lambda learner: learner.update_cost_multiplier(mean_cost)
        )
    else:
        values = algorithm.learner_group.foreach_learner(
            lambda learner: learner.multiplier.multiplier
        )
    result[RESULT_KEY] = {
        "episode_cost_mean": mean_cost,
        COST_MULTIPLIER: float(next(iter(values)).get()),
        "cost_limit": safe["cost_limit"],
        "cost_limit_violation": max(0.0, mean_cost - safe["cost_limit"])
        if episodes > 0
        else math.nan,
    }


def _safe_builder(learner_class: type[SafeJointCriticLearner], name: str):
    def build(settings, env: EnvHandle, share_policy: str, seed: int | None):
        safe = {k: v for k, v in asdict(settings).items() if k in _SAFE_FIELD_NAMES}
        config = build_joint_critic_ppo(
            settings,
            env,
            share_policy,
            seed,
            learner_class=learner_class,
            critic_spec=lambda mapping: central_critic_spec(settings, env, cost_head=True),
        )
        return config.learners(learner_config_dict={SAFE_CONFIG_KEY: safe}).callbacks(
            on_episode_end=log_episode_cost, on_train_result=update_cost_multiplier
        )

    build.__doc__ = f"{name}: {learner_class.__doc__.splitlines()[0]}"
    return build


build_mappo_lag = _safe_builder(SafeJointCriticLearner, "mappo_lag")
build_mappo_pid_lag = _safe_builder(PIDLagLearner, "mappo_pid_lag")
build_mappo_cup = _safe_builder(CUPLearner, "mappo_cup")
build_mappo_focops = _safe_builder(FOCOPSLearner, "mappo_focops")
