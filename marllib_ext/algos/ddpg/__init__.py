"""The DDPG family on replayed team transitions: ``iddpg``, ``maddpg``, ``facmac``
(MARLlib), with TD3's twin critics and target smoothing as options. ``settings`` holds
the YAML fields, ``learners`` the per-algorithm team losses, ``builders`` the RLlib
configs; ``algos.team_replay`` stores, samples and prioritizes."""

from marllib_ext.algos.ddpg.builders import TEAM_MODULE, build_facmac, build_iddpg, build_maddpg
from marllib_ext.algos.ddpg.learners import (
    DDPGLearner,
    FACMACLearner,
    IDDPGLearner,
    MADDPGLearner,
    held_fixed,
)
from marllib_ext.algos.ddpg.settings import DDPGSettings, FACMACSettings

__all__ = [
    "TEAM_MODULE",
    "DDPGLearner",
    "DDPGSettings",
    "FACMACLearner",
    "FACMACSettings",
    "IDDPGLearner",
    "MADDPGLearner",
    "build_facmac",
    "build_iddpg",
    "build_maddpg",
    "held_fixed",
]
