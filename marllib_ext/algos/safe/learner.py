"""The safe-MARL learner shared by all four algorithms: a central critic with a cost
head, cost GAE in the joint-advantage connector and a Lagrange multiplier."""

from __future__ import annotations

import math
from typing import Any

import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override

from marllib_ext.algos.ppo.learners import JointCriticPPOLearner, masked_value_loss
from marllib_ext.ops.lagrange import Lagrange, PIDLagrangian
from marllib_ext.policies.joint_critic import COST_VF_PREDS, team_critic_ids
from marllib_ext.postprocessing.cost_advantage import (
    COST_VALUE_TARGETS,
    CostJointAdvantageConnector,
)
from marllib_ext.rllib_compat import should_save_component

MULTIPLIER_STATE_KEY = "cost_multiplier"
COST_MULTIPLIER = "cost_multiplier"


class SafeJointCriticLearner(JointCriticPPOLearner):
    """MAPPO learner with a cost critic, cost GAE and a cost multiplier (``mappo_lag``).

    One multiplier per team (one on a cooperative env), each stepped on its own team's
    mean episode cost; they live here and in checkpoints (``get_state``), and each
    team's advantage connector reads its team's current value.
    """

    advantage_connector_class = CostJointAdvantageConnector
    advantage_mode = "lagrangian"

    @override(JointCriticPPOLearner)
    def build(self) -> None:
        super().build()
        teams = [team for team, _ in self.settings.teams] or ["team"]
        team_of_critic = {critic: team for team, critic in team_critic_ids(teams).items()}
        self.team_of_module = {
            **team_of_critic,
            **{actor: team_of_critic[c] for actor, c in self.critic_of_actor.items()},
        }
        self.multipliers = {team: self.make_multiplier() for team in teams}
        self._sync_multipliers()

    def make_multiplier(self) -> Lagrange | PIDLagrangian:
        """A team's cost multiplier: Adam on ``-lam * (J_c - d)`` (SafePO's ``Lagrange``)."""
        return Lagrange(
            cost_limit=self.settings.cost_limit,
            init=self.settings.lagrangian_multiplier_init,
            lr=self.settings.lagrangian_multiplier_lr,
            upper_bound=self.settings.lagrangian_upper_bound,
        )

    @property
    def multiplier(self) -> Lagrange | PIDLagrangian:
        """The multiplier of a one-team env."""
        if len(self.multipliers) != 1:
            raise ValueError(f"one multiplier per team here: {sorted(self.multipliers)}")
        return next(iter(self.multipliers.values()))

    def multiplier_of(self, module_id: str) -> float:
        """The current multiplier of ``module_id``'s team (an actor or a critic)."""
        return self.multipliers[self.team_of_module[module_id]].multiplier

    @override(JointCriticPPOLearner)
    def advantage_connector_kwargs(self) -> dict[str, Any]:
        return {**super().advantage_connector_kwargs(), "advantage_mode": self.advantage_mode}

    def update_cost_multipliers(self, mean_episode_costs: dict[str, float]) -> dict[str, float]:
        """One step of each team's multiplier from the iteration's mean episode cost of
        that team (teams without a finished episode keep theirs); the new values."""
        for team, cost in mean_episode_costs.items():
            if math.isfinite(cost):
                self.multipliers[team].update(cost)
        self._sync_multipliers()
        return self.current_multipliers()

    def current_multipliers(self) -> dict[str, float]:
        return {team: m.multiplier for team, m in self.multipliers.items()}

    def _sync_multipliers(self) -> None:
        for connector in self.advantage_connectors():
            connector.cost_multiplier = self.multiplier_of(connector.critic_module_id)

    @override(JointCriticPPOLearner)
    def critic_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        loss = super().critic_loss(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
        cost_loss, explained = masked_value_loss(
            fwd_out[COST_VF_PREDS],
            batch[COST_VALUE_TARGETS],
            batch[Columns.LOSS_MASK],
            clip=self.settings.vf_clip_param,
        )
        self.metrics.log_dict(
            {
                "cost_vf_loss": cost_loss,
                "cost_vf_explained_var": explained,
                COST_MULTIPLIER: self.multiplier_of(module_id),
            },
            key=module_id,
            window=1,
        )
        return loss + config.vf_loss_coeff * cost_loss

    @override(PPOTorchLearner)
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        if should_save_component(self, MULTIPLIER_STATE_KEY, components, not_components):
            state[MULTIPLIER_STATE_KEY] = {
                team: multiplier.get_state() for team, multiplier in self.multipliers.items()
            }
        return state

    @override(PPOTorchLearner)
    def set_state(self, state) -> None:
        if MULTIPLIER_STATE_KEY in state:
            saved = state[MULTIPLIER_STATE_KEY]
            if "multiplier" in saved:  # one-team checkpoints before per-team multipliers
                saved = {team: saved for team in self.multipliers}
            for team, team_state in saved.items():
                self.multipliers[team].set_state(team_state)
            self._sync_multipliers()
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


def ratio_kl_entropy(module, batch, fwd_out, reference_dist_inputs):
    """``pi/pi_behaviour`` of the sampled actions, per-sample ``KL(pi || pi_ref)`` and
    the entropy of ``pi``."""
    dist_class = module.get_train_action_dist_cls()
    current = dist_class.from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
    reference = dist_class.from_logits(reference_dist_inputs)
    ratio = torch.exp(current.logp(batch[Columns.ACTIONS]) - batch[Columns.ACTION_LOGP])
    return ratio, current.kl(reference), current.entropy()
