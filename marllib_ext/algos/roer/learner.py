"""SAC learner with ROER's value network, value loss and priorities (seed 003)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.sac.sac_learner import QF_PREDS, QF_TWIN_PREDS
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override

from marllib_ext.ops.roer import (
    state_value_td_error,
)
from marllib_ext.rllib_compat import (
    ActorBackwardApart,
    ReadsEpisodesAsSortedAgents,
    RestoresOptimizerStateUnshared,
    SameModuleOrderOnEveryLearner,
    TargetUpdateEveryGradientStep,
    hand_priorities_to_replay,
    last_td_error,
    plain_module,
    record_extra_loss,
    settings_of,
)

VALUE_LOSS_KEY = "value_loss"
# Fast path (fast_replay): each row's index in the algorithm's transition store, so that
# the priorities come back to the rows they belong to whatever the minibatch order.
REPLAY_INDEX = "replay_index"


class ROERSACLearner(
    ReadsEpisodesAsSortedAgents,
    ActorBackwardApart,
    TargetUpdateEveryGradientStep,
    SameModuleOrderOnEveryLearner,
    RestoresOptimizerStateUnshared,
    SACTorchLearner,
):
    """Adds to RLlib's SAC losses a value loss on ``diff = min(Q1, Q2)(s, a) - V(s)``
    (Gumbel for KL, ``softplus - log 2`` for JS, ``diff^2 / 2`` otherwise) and, for
    KL/JS, hands the ROER priority of
    ``delta = r + gamma^n * (1 - terminated) * V(s') - V(s)`` to the replay buffer in
    place of RLlib's ``|Q - target|``.

    Fast path (``fast_replay``): the batch carries ``REPLAY_INDEX``; every minibatch's
    priorities (by the ``per_type`` rule; PER's from RLlib's ``|Q - target|``) are kept
    with their row indices until ``take_replay_feedback``, and the target nets take
    their soft update after every gradient step."""

    @override(SACTorchLearner)
    def build(self) -> None:
        super().build()
        self.settings = settings_of(self.config)
        self.per_step_targets = self.fused_backward = self.settings.fast_replay
        self.replay_feedback: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def take_replay_feedback(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``{module_id: (row indices, priorities)}`` of the minibatches since the last
        call, in the order they were taken; cleared."""
        feedback = {
            module_id: (
                torch.cat([index for index, _ in parts]).cpu().numpy().astype(np.int64),
                torch.cat([priority for _, priority in parts]).cpu().numpy(),
            )
            for module_id, parts in self.replay_feedback.items()
            if parts
        }
        self.replay_feedback = {}
        return feedback

    @override(SACTorchLearner)
    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        super().configure_optimizers_for_module(module_id, config)
        params = self.get_parameters(plain_module(self.module, module_id).vf)
        self.register_optimizer(
            module_id=module_id,
            optimizer_name="value",
            optimizer=torch.optim.Adam(params, eps=1e-7),
            params=params,
            lr_or_lr_schedule=config.critic_lr,
        )
        if settings_of(self.config).fast_replay:  # one fused Adam kernel per step on CPU
            for _, optimizer in self.get_optimizers_for_module(module_id):
                for group in optimizer.param_groups:
                    group["foreach"] = True

    @override(SACTorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        total = super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        roer = self.settings
        module = plain_module(self.module, module_id)
        values = module.compute_state_values(batch[Columns.OBS])
        q = self._q_of_taken_actions(module, batch, fwd_out).detach()
        diff = q - values
        rule = roer.priority_rule
        value_loss, norm = rule.value_loss(
            diff, temp=roer.temp, gumbel_max_clip=roer.gumbel_max_clip
        )
        value_loss = value_loss.mean()

        with torch.no_grad():
            td_error = state_value_td_error(
                batch[Columns.REWARDS],
                values.detach(),
                module.compute_state_values(batch[Columns.NEXT_OBS]),
                batch[Columns.TERMINATEDS],
                config.gamma ** batch["n_step"],
            )
        metrics = {
            VALUE_LOSS_KEY: value_loss,
            "norm": norm,
            "td_error_mean": td_error.mean(),
            "v_mean": values.mean(),
        }
        if REPLAY_INDEX in batch:  # fast path: priorities kept with their rows
            rllib_td_error = last_td_error(self.metrics, module_id)
            if rule.prioritized:
                source = td_error if rule.roer else rllib_td_error
                priority, weight = rule.priorities(source.detach(), roer)
                self.replay_feedback.setdefault(module_id, []).append(
                    (batch[REPLAY_INDEX].detach(), priority.detach())
                )
                metrics.update({"priority_mean": priority.mean(), "per_weight": weight.mean()})
        elif rule.roer:  # PER's priorities are RLlib's own |TD error| of the Q loss
            priority, weight = rule.priorities(td_error, roer)
            hand_priorities_to_replay(self.metrics, module_id, priority)
            metrics.update({"priority_mean": priority.mean(), "per_weight": weight.mean()})
        self.metrics.log_dict(metrics, key=module_id, window=1)
        record_extra_loss(self, module_id, VALUE_LOSS_KEY, value_loss)
        return total + value_loss

    @staticmethod
    def _q_of_taken_actions(module, batch, fwd_out) -> torch.Tensor:
        q, q_twin = fwd_out[QF_PREDS], fwd_out.get(QF_TWIN_PREDS)
        if isinstance(module.action_space, gym.spaces.Discrete):
            actions = batch[Columns.ACTIONS].to(dtype=torch.int64).unsqueeze(-1)
            q = q.gather(dim=-1, index=actions).squeeze(-1)
            if q_twin is not None:
                q_twin = q_twin.gather(dim=-1, index=actions).squeeze(-1)
        return q if q_twin is None else torch.min(q, q_twin)
