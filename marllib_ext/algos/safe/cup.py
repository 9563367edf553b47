"""``mappo_cup``: each update is PPO on the reward advantage, then a projection pass
on the cost advantage (SafePO's CUP)."""

from __future__ import annotations

import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override

from marllib_ext.algos.ppo.learners import masked_mean
from marllib_ext.algos.safe.learner import SafeJointCriticLearner, ratio_kl_entropy
from marllib_ext.ops.lagrange import cup_coefficient, cup_projection_loss
from marllib_ext.policies.joint_critic import is_critic_module
from marllib_ext.postprocessing.cost_advantage import COST_ADVANTAGES
from marllib_ext.rllib_compat import CapturesTrainBatch, plain_module

CUP_REFERENCE_DIST_INPUTS = "cup_reference_action_dist_inputs"


class CUPLearner(CapturesTrainBatch, SafeJointCriticLearner):
    """Each update is PPO on ``A_r`` (actors and critic), then a projection pass over the
    same batch (actors only) minimizing ``lam * coef * ratio * A_c + KL(pi ||
    pi_after_step_1)``, ``coef = (1 - gamma * cup_lambda) / (1 - gamma)``."""

    advantage_mode = "reward"
    _projecting = False

    @override(SafeJointCriticLearner)
    def build(self) -> None:
        super().build()
        self.cup_coefficient = cup_coefficient(self.settings.gamma, self.settings.cup_lambda)

    @override(PPOTorchLearner)
    def update(self, *args, training_data=None, timesteps=None, **kwargs):
        self._projecting = False
        super().update(
            *args,
            training_data=training_data,
            timesteps=timesteps,
            _no_metrics_reduce=True,
            **kwargs,
        )
        projection = self._projection_batch(self.last_train_batch)
        self.last_train_batch = None
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
            if is_critic_module(module_id):
                continue
            data = {c: module_batch[c] for c in columns if c in module_batch}
            with torch.no_grad():
                out = plain_module(self.module, module_id).forward_train(dict(data))
            data[CUP_REFERENCE_DIST_INPUTS] = out[Columns.ACTION_DIST_INPUTS].detach()
            policy_batches[module_id] = SampleBatch(data)
        return MultiAgentBatch(policy_batches, env_steps=batch.env_steps())

    @override(SafeJointCriticLearner)
    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        if not self._projecting:
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
