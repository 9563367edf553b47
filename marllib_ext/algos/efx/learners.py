"""EFX's learners: the joint-critic pipelines (MAPPO, VDPPO, HAPPO, HATRPO) whose
advantage connector writes the conservative advantage instead of the team GAE."""

from __future__ import annotations

from marllib_ext.algos.happo.learner import HAPPOLearner, TeamRowColumn
from marllib_ext.algos.ppo.learners import JointCriticPPOLearner
from marllib_ext.algos.trust_region.learners import HATRPOLearner
from marllib_ext.postprocessing.efx_advantage import (
    EFXJointAdvantageConnector,
    EFXVDJointAdvantageConnector,
)


class EFXJointCriticLearner(JointCriticPPOLearner):
    """MAPPO learner whose advantage connector applies the conservative advantage."""

    advantage_connector_class = EFXJointAdvantageConnector


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
