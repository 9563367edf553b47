"""Advantage actor-critic on the three pipelines: ``ia2c`` (IL), ``maa2c`` (CC) and
``vda2c`` (VD). Each is the PPO-family pipeline with A2C's actor loss
(:func:`marllib_ext.ops.a2c.a2c_policy_loss`) in place of the clipped surrogate, and one
gradient step per batch (``num_epochs: 1``, one minibatch)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY
from ray.rllib.utils.annotations import override

from marllib_ext.algos.config import CentralCriticSettings, Check, PPOSettings, VDSettings
from marllib_ext.algos.ppo.builders import build_ippo, build_mappo, build_vdppo
from marllib_ext.algos.ppo.learners import (
    JointCriticPPOLearner,
    PPOLearner,
    VDPPOLearner,
    masked_mean,
    own_value_loss,
)
from marllib_ext.ops.a2c import a2c_policy_loss
from marllib_ext.rllib_compat import plain_module


@dataclass(frozen=True)
class OnePassFields:
    """A2C takes one gradient step per batch (``clip_param`` and the KL keys are unused)."""

    def checks(self) -> list[Check]:
        return [
            (self.num_epochs == 1, "num_epochs", "A2C takes one pass per batch: must be 1"),
            (
                self.minibatch_size is None,
                "minibatch_size",
                "A2C takes one step on the whole batch: must be null",
            ),
        ]


@dataclass(frozen=True)
class A2CSettings(PPOSettings, OnePassFields):
    """``ia2c``."""


@dataclass(frozen=True)
class MAA2CSettings(CentralCriticSettings, OnePassFields):
    """``maa2c``."""


@dataclass(frozen=True)
class VDA2CSettings(VDSettings, OnePassFields):
    """``vda2c``."""


def a2c_actor_loss(learner, module_id, batch, fwd_out) -> torch.Tensor:
    """Mean A2C policy loss of one actor module over its valid rows (logs
    ``policy_loss`` and ``entropy``)."""
    module = plain_module(learner.module, module_id)
    dist = module.get_train_action_dist_cls().from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
    entropy = dist.entropy()
    entropy_coeff = learner.entropy_coeff_schedulers_per_module[module_id].get_current_value()
    per_sample = a2c_policy_loss(
        dist.logp(batch[Columns.ACTIONS]),
        batch[Columns.ADVANTAGES],
        entropy,
        entropy_coeff=entropy_coeff,
    )
    mean = masked_mean(batch)
    learner.metrics.log_dict(
        {POLICY_LOSS_KEY: mean(per_sample), ENTROPY_KEY: mean(entropy)},
        key=module_id,
        window=1,
    )
    return mean(per_sample)


class IA2CLearner(PPOLearner):
    """Independent A2C: each policy's own value head and GAE (RLlib's PPO pipeline),
    A2C's actor loss plus ``vf_loss_coeff`` times the value loss (squared error clamped
    at ``vf_clip_param`` as in RLlib's PPO)."""

    @override(PPOTorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        policy_loss = a2c_actor_loss(self, module_id, batch, fwd_out)
        return policy_loss + own_value_loss(self, module_id, config, batch, fwd_out)


class MAA2CLearner(JointCriticPPOLearner):
    """MAA2C: A2C's actor loss on the team advantages of the central critic."""

    @override(JointCriticPPOLearner)
    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        return a2c_actor_loss(self, module_id, batch, fwd_out)


class VDA2CLearner(VDPPOLearner):
    """VDA2C: A2C's actor loss on the team advantages from ``V_tot`` (VDN or QMIX)."""

    @override(JointCriticPPOLearner)
    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        return a2c_actor_loss(self, module_id, batch, fwd_out)


def build_ia2c(settings, env, share_policy, seed):
    """IA2C: independent actor-critics, A2C's loss, one step per batch."""
    return build_ippo(settings, env, share_policy, seed).learners(learner_class=IA2CLearner)


def build_maa2c(settings, env, share_policy, seed):
    """MAA2C: A2C actors on the centralized critic's team advantages."""
    return build_mappo(settings, env, share_policy, seed, learner_class=MAA2CLearner)


def build_vda2c(settings, env, share_policy, seed):
    """VDA2C: A2C actors on team advantages from the mixed ``V_tot``."""
    return build_vdppo(settings, env, share_policy, seed, learner_class=VDA2CLearner)
