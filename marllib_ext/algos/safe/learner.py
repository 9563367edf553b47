"""The safe-MARL learner shared by all four algorithms: a central critic with a cost
head, cost GAE in the joint-advantage connector and a Lagrange multiplier."""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override

from marllib_ext.algos.learners import JointCriticPPOLearner, masked_value_loss
from marllib_ext.ops.lagrange import Lagrange, PIDLagrangian
from marllib_ext.postprocessing.cost_advantage import (
    COST_VALUE_TARGETS,
    CostJointAdvantageConnector,
)
from marllib_ext.rllib_compat import should_save_component

MULTIPLIER_STATE_KEY = "cost_multiplier"
COST_MULTIPLIER = "cost_multiplier"


class SafeJointCriticLearner(JointCriticPPOLearner):
    """MAPPO learner with a cost critic, cost GAE and a cost multiplier (``mappo_lag``).

    The multiplier lives here and in checkpoints (``get_state``); the advantage
    connector reads its current value.
    """

    advantage_connector_class = CostJointAdvantageConnector
    advantage_mode = "lagrangian"

    @override(JointCriticPPOLearner)
    def build(self) -> None:
        super().build()
        self.multiplier = self.make_multiplier()
        self._sync_multiplier()

    def make_multiplier(self) -> Lagrange | PIDLagrangian:
        """The cost multiplier: Adam on ``-lam * (J_c - d)`` (SafePO's ``Lagrange``)."""
        return Lagrange(
            cost_limit=self.settings.cost_limit,
            init=self.settings.lagrangian_multiplier_init,
            lr=self.settings.lagrangian_multiplier_lr,
            upper_bound=self.settings.lagrangian_upper_bound,
        )

    @override(JointCriticPPOLearner)
    def advantage_connector_kwargs(self) -> dict[str, Any]:
        return {**super().advantage_connector_kwargs(), "advantage_mode": self.advantage_mode}

    def update_cost_multiplier(self, mean_episode_cost: float) -> float:
        """One multiplier step from the iteration's mean team episode cost."""
        value = self.multiplier.update(mean_episode_cost)
        self._sync_multiplier()
        return value

    def _sync_multiplier(self) -> None:
        for connector in self.advantage_connectors():
            connector.cost_multiplier = self.multiplier.multiplier

    @override(JointCriticPPOLearner)
    def critic_loss(self, *, module_id, config, batch) -> torch.Tensor:
        loss = super().critic_loss(module_id=module_id, config=config, batch=batch)
        critic = self.module[module_id].unwrapped()
        cost_loss, explained = masked_value_loss(
            critic.compute_cost_values(batch),
            batch[COST_VALUE_TARGETS],
            batch[Columns.LOSS_MASK],
            clip=self.settings.vf_clip_param,
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

    @override(PPOTorchLearner)
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        if should_save_component(self, MULTIPLIER_STATE_KEY, components, not_components):
            state[MULTIPLIER_STATE_KEY] = self.multiplier.get_state()
        return state

    @override(PPOTorchLearner)
    def set_state(self, state) -> None:
        if MULTIPLIER_STATE_KEY in state:
            self.multiplier.set_state(state[MULTIPLIER_STATE_KEY])
            self._sync_multiplier()
        super().set_state({k: v for k, v in state.items() if k != MULTIPLIER_STATE_KEY})


class PIDLagLearner(SafeJointCriticLearner):
    """``mappo_pid_lag``: the multiplier is a PID controller on the cost error."""

    @override(SafeJointCriticLearner)
    def make_multiplier(self) -> PIDLagrangian:
        s = self.settings
        return PIDLagrangian(
            cost_limit=s.cost_limit,
            kp=s.pid_kp,
            ki=s.pid_ki,
            kd=s.pid_kd,
            d_delay=s.pid_d_delay,
            delta_p_ema_alpha=s.pid_delta_p_ema_alpha,
            delta_d_ema_alpha=s.pid_delta_d_ema_alpha,
            sum_norm=s.pid_sum_norm,
            diff_norm=s.pid_diff_norm,
            penalty_max=s.pid_penalty_max,
            init=s.lagrangian_multiplier_init,
        )


def masked_mean(batch) -> Any:
    """Mean over the batch's loss mask (plain mean without one)."""
    if Columns.LOSS_MASK in batch:
        mask = batch[Columns.LOSS_MASK]
        count = torch.sum(mask)
        return lambda values: torch.sum(values[mask]) / count
    return torch.mean


def ratio_kl_entropy(module, batch, fwd_out, reference_dist_inputs):
    """``pi/pi_behaviour`` of the sampled actions, per-sample ``KL(pi || pi_ref)`` and
    the entropy of ``pi``."""
    dist_class = module.get_train_action_dist_cls()
    current = dist_class.from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
    reference = dist_class.from_logits(reference_dist_inputs)
    ratio = torch.exp(current.logp(batch[Columns.ACTIONS]) - batch[Columns.ACTION_LOGP])
    return ratio, current.kl(reference), current.entropy()
