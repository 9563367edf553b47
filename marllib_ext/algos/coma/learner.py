"""``coma``: counterfactual multi-agent policy gradients (Foerster et al. 2018) on the CC
pipeline, with A2C's actor loss as MARLlib's COMA.

The learner-only critic ``Q(s, a_{-i}, i)`` outputs one value per action of agent i; the
actors train on ``A_i = Q(s, a)[a_i] - sum_a' pi_i(a'|o_i) Q(s, (a_{-i}, a'))``
(``ops.coma``), and the critic on TD(lambda) targets of the team reward.

The schedule (:data:`marllib_ext.algos.ppo.schedule.COMA`): the critic takes
``critic_epochs`` passes in minibatches of ``critic_minibatch_size`` rows, then the
actors A2C's one step, on the same batch (the advantages were computed from the critic
before either). With one Adam step per batch the critic
cannot follow its targets (team returns of -45..-80 on simple_spread; after 25 steps its
``Q_taken`` mean was -0.4), its action values stay noise, and the policy collapsed
below random after 120k steps."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import VF_LOSS_KEY
from ray.rllib.utils.annotations import override

from marllib_ext.algos.coma.batch import coma_block_batch
from marllib_ext.algos.config import Check, divisible_by_learners
from marllib_ext.algos.ppo.a2c import MAA2CSettings, a2c_actor_loss
from marllib_ext.algos.ppo.learners import JointCriticPPOLearner, masked_value_loss
from marllib_ext.policies.coma_critic import Q_VALUES
from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector


@dataclass(frozen=True)
class COMASettings(MAA2CSettings):
    """``maa2c``'s settings plus the critic's own passes over each batch."""

    critic_epochs: int
    critic_minibatch_size: int | None  # rows of the critic batch (agents x env steps)

    def checks(self) -> list[Check]:
        return [
            (self.critic_epochs > 0, "critic_epochs", "must be > 0"),
            (
                self.critic_minibatch_size is None or self.critic_minibatch_size > 0,
                "critic_minibatch_size",
                "must be > 0 or null",
            ),
            *divisible_by_learners(self, "critic_minibatch_size"),
            *(
                (value is None or value is False, key, "COMA's per-action Q: not yet supported")
                for key, value in (
                    ("value_norm", self.value_norm),
                    ("huber_delta", self.huber_delta),
                    ("value_clip", self.value_clip),
                    ("feature_norm", self.feature_norm),
                )
            ),
        ]


class COMAAdvantageConnector(JointAdvantageConnector):
    """COMA's batch from rollout blocks, or from episode chunks read as blocks
    (``coma.batch.coma_block_batch``)."""

    block_builder = staticmethod(coma_block_batch)


class COMALearner(JointCriticPPOLearner):
    """A2C actors on the counterfactual advantage; the critic's loss is the masked MSE
    of ``Q(s, a_{-i}, i)[a_i]`` against the TD(lambda) targets."""

    advantage_connector_class = COMAAdvantageConnector

    @override(JointCriticPPOLearner)
    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        return a2c_actor_loss(self, module_id, batch, fwd_out)

    @override(JointCriticPPOLearner)
    def critic_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        q_values = fwd_out[Q_VALUES]
        q_taken = torch.gather(q_values, -1, batch[Columns.ACTIONS].long()[:, None])[:, 0]
        loss, _ = masked_value_loss(
            q_taken,
            batch[Columns.VALUE_TARGETS],
            batch[Columns.LOSS_MASK],
            clip=self.settings.vf_clip_param,
        )
        self.metrics.log_value((module_id, VF_LOSS_KEY), loss, window=1)
        return config.vf_loss_coeff * loss
