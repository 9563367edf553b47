"""``mappo_focops``: FOCOPS's first-order constrained policy loss on the actors."""

from __future__ import annotations

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.utils.annotations import override

from marllib_ext.algos.ppo.learners import masked_mean
from marllib_ext.algos.safe.learner import SafeJointCriticLearner, ratio_kl_entropy
from marllib_ext.ops.lagrange import focops_loss
from marllib_ext.rllib_compat import plain_module


class FOCOPSLearner(SafeJointCriticLearner):
    """``(KL(pi||pi_old) - ratio*A/focops_lam) * 1[KL <= focops_eta]`` on the Lagrangian
    advantage, minus the entropy bonus; ``pi_old`` is the sampling policy."""

    @override(SafeJointCriticLearner)
    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        module = plain_module(self.module, module_id)
        ratio, kl, entropy = ratio_kl_entropy(
            module, batch, fwd_out, batch[Columns.ACTION_DIST_INPUTS]
        )
        eta = self.settings.focops_eta
        per_sample = focops_loss(
            ratio,
            batch[Columns.ADVANTAGES],
            kl,
            focops_lam=self.settings.focops_lam,
            focops_eta=eta,
        )
        mean = masked_mean(batch)
        entropy_coeff = self.entropy_coeff_schedulers_per_module[module_id].get_current_value()
        self.metrics.log_dict(
            {
                POLICY_LOSS_KEY: mean(per_sample),
                "focops_kl": mean(kl),
                "focops_inside_fraction": mean((kl.detach() <= eta).float()),
                "entropy": mean(entropy),
            },
            key=module_id,
            window=1,
        )
        return mean(per_sample - entropy_coeff * entropy)
