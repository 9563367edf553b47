"""Joint Q-learning on replayed team episodes: ``iql``, ``vdn``, ``qmix`` (MARLlib /
PyMARL). ``settings`` holds the YAML fields, ``learners`` the per-algorithm team losses,
``builders`` the RLlib configs; ``algos.team_replay`` stores, samples and prioritizes."""

from marllib_ext.algos.joint_q.builders import build_iql, build_qmix, build_vdn
from marllib_ext.algos.joint_q.learners import IQLLearner, MixedQLearner, QMIXLearner, VDNLearner
from marllib_ext.algos.joint_q.settings import JointQSettings

__all__ = [
    "IQLLearner",
    "JointQSettings",
    "MixedQLearner",
    "QMIXLearner",
    "VDNLearner",
    "build_iql",
    "build_qmix",
    "build_vdn",
]
