"""EFX's learners: the joint-critic pipelines (MAPPO, VDPPO, HAPPO, HATRPO) whose
advantage connector writes the conservative advantage instead of the team GAE."""

from __future__ import annotations

from ray.rllib.core.columns import Columns

from marllib_ext.algos.happo.learner import HAPPOLearner, TeamRowColumn
from marllib_ext.algos.ppo.learners import JointCriticPPOLearner, masked_mean
from marllib_ext.algos.trust_region.learners import HATRPOLearner
from marllib_ext.ops.budget_temperature import temperature_push_loss
from marllib_ext.policies.budget_actor import TEMPERATURE_DIST_INPUTS
from marllib_ext.postprocessing.efx_advantage import (
    PUSH_ADVANTAGES,
    EFXJointAdvantageConnector,
    EFXVDJointAdvantageConnector,
)
from marllib_ext.rllib_compat import plain_module

PUSH_LOSS = "efx_push_loss"


class EFXJointCriticLearner(JointCriticPPOLearner):
    """MAPPO learner whose advantage connector applies the conservative advantage.

    With ``push_gradient: temperature`` the push arrives in its own column and trains
    the budget temperature only (:func:`temperature_push_loss`); PPO's own loss sees
    the conservative extrinsic advantage."""

    advantage_connector_class = EFXJointAdvantageConnector

    def actor_loss(self, *, module_id, config, batch, fwd_out):
        loss = super().actor_loss(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
        if PUSH_ADVANTAGES not in batch:
            return loss
        dist_class = plain_module(self.module, module_id).get_train_action_dist_cls()
        tempered = dist_class.from_logits(fwd_out[TEMPERATURE_DIST_INPUTS])
        push_loss = temperature_push_loss(
            tempered.logp(batch[Columns.ACTIONS]),
            batch[Columns.ACTION_LOGP],
            batch[PUSH_ADVANTAGES],
            clip=config.clip_param,
            mean=masked_mean(batch),
        )
        self.metrics.log_value((module_id, PUSH_LOSS), push_loss.detach(), window=1)
        return loss + push_loss


class EFXVDLearner(EFXJointCriticLearner):
    """VDPPO learner with the conservative advantage."""

    advantage_connector_class = EFXVDJointAdvantageConnector


class EFXHAPPOAdvantageConnector(TeamRowColumn, EFXJointAdvantageConnector):
    """EFX's conservative advantage (``efx_mappo``'s hook) plus the team-row column."""


class EFXHAPPOLearner(HAPPOLearner):
    """``efx_happo``: HAPPO on EFX's conservative advantage."""

    advantage_connector_class = EFXHAPPOAdvantageConnector


class EFXHATRPOLearner(HATRPOLearner):
    """``efx_hatrpo``: HATRPO's trust-region steps on EFX's conservative advantage."""

    advantage_connector_class = EFXHAPPOAdvantageConnector
