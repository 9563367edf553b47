"""The flat layout's one-class learners and configs, for checkpoints written before
each team-replay algorithm had its own learner (``legacy_paths`` maps the old names
here). Each builds the algorithm's own learner from the old settings key that used to
pick the loss: ``mixer`` for joint Q-learning, ``critic_mode`` for the DDPG family."""

from __future__ import annotations

from ray.rllib.utils.annotations import override

from marllib_ext.algos.team_replay.specs import TeamReplayConfig
from marllib_ext.rllib_compat import settings_of


class JointQLearner:
    """``mixer`` ``none`` -> ``IQLLearner``, ``vdn`` -> ``VDNLearner``, ``qmix`` ->
    ``QMIXLearner``."""

    def __new__(cls, *, config, **kwargs):
        from marllib_ext.algos.joint_q import IQLLearner, QMIXLearner, VDNLearner

        learner = {"none": IQLLearner, "vdn": VDNLearner, "qmix": QMIXLearner}
        return learner[settings_of(config).mixer](config=config, **kwargs)


class DDPGFamilyLearner:
    """``critic_mode`` ``local`` -> ``IDDPGLearner``, ``central`` -> ``MADDPGLearner``,
    ``mixed`` -> ``FACMACLearner``."""

    def __new__(cls, *, config, **kwargs):
        from marllib_ext.algos.ddpg import FACMACLearner, IDDPGLearner, MADDPGLearner

        learner = {"local": IDDPGLearner, "central": MADDPGLearner, "mixed": FACMACLearner}
        return learner[settings_of(config).critic_mode](config=config, **kwargs)


class JointQConfig(TeamReplayConfig):
    """The flat layout's joint-Q config class."""

    @override(TeamReplayConfig)
    def get_default_learner_class(self):
        return JointQLearner


class DDPGFamilyConfig(TeamReplayConfig):
    """The flat layout's DDPG-family config class."""

    @override(TeamReplayConfig)
    def get_default_learner_class(self):
        return DDPGFamilyLearner
