"""``mappo_cup``: each update is PPO on the reward advantage, then a projection phase
on the cost advantage (SafePO's CUP)."""

from __future__ import annotations

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override

from marllib_ext.algos.ppo.learners import masked_mean
from marllib_ext.algos.safe.learner import SafeJointCriticLearner, ratio_kl_entropy
from marllib_ext.ops.lagrange import cup_coefficient, cup_projection_loss
from marllib_ext.postprocessing.cost_advantage import COST_ADVANTAGES
from marllib_ext.rllib_compat import plain_module
from marllib_ext.rllib_compat.minibatches import module_batch as module_batch_of

CUP_REFERENCE_DIST_INPUTS = "cup_reference_action_dist_inputs"


class CUPLearner(SafeJointCriticLearner):
    """The schedule (:data:`marllib_ext.algos.ppo.schedule.CUP`): PPO on ``A_r`` (actors and
    critic), then a projection phase over the same batch (actors only) minimizing
    ``lam * coef * ratio * A_c + KL(pi || pi_after_step_1)``,
    ``coef = (1 - gamma * cup_lambda) / (1 - gamma)``."""

    advantage_mode = "reward"

    @override(SafeJointCriticLearner)
    def build(self) -> None:
        super().build()
        self.cup_coefficient = cup_coefficient(self.settings.gamma, self.settings.cup_lambda)

    def projection_step(self, phase, module_batches: dict, context):
        """The phase's SGD epochs on the projection loss: the actors' rows plus the
        action-distribution inputs of the policy the previous phase left."""
        columns = (
            Columns.OBS,
            Columns.ACTIONS,
            Columns.ACTION_LOGP,
            COST_ADVANTAGES,
            Columns.LOSS_MASK,
            Columns.STATE_IN,  # recurrent actors' sequences
            Columns.SEQ_LENS,
        )
        projection = {}
        for module_id, module_batch in module_batches.items():
            data = {c: module_batch[c] for c in columns if c in module_batch}
            with torch.no_grad():
                out = plain_module(self.module, module_id).forward_train(dict(data))
            data[CUP_REFERENCE_DIST_INPUTS] = out[Columns.ACTION_DIST_INPUTS].detach()
            projection[module_id] = module_batch_of(data)
        return self.sgd_step(phase, projection, context)

    @override(SafeJointCriticLearner)
    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        if CUP_REFERENCE_DIST_INPUTS not in batch:
            return super().actor_loss(
                module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
            )
        module = plain_module(self.module, module_id)
        ratio, kl, _ = ratio_kl_entropy(module, batch, fwd_out, batch[CUP_REFERENCE_DIST_INPUTS])
        per_sample = cup_projection_loss(
            ratio,
            batch[COST_ADVANTAGES],
            kl,
            multiplier=self.multiplier_of(module_id),
            coefficient=self.cup_coefficient,
        )
        mean = masked_mean(batch)
        self.metrics.log_dict(
            {"cup_projection_loss": mean(per_sample), "cup_projection_kl": mean(kl)},
            key=module_id,
            window=1,
        )
        return mean(per_sample)
