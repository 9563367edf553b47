"""The PPO / A2C core of the three MARLlib pipelines: ``ippo`` / ``ia2c`` (independent),
``mappo`` / ``maa2c`` (centralized critic), ``vdppo`` / ``vda2c`` (value decomposition).

- ``learners``: the PPO learners (per-module, joint critic, value decomposition);
- ``builders``: the RLlib configs and critic specs every PPO-based family builds on;
- ``a2c``: A2C's one-pass settings and learners over the same pipelines.
"""

from marllib_ext.algos.ppo.a2c import (
    A2CSettings,
    MAA2CSettings,
    VDA2CSettings,
    build_ia2c,
    build_maa2c,
    build_vda2c,
)
from marllib_ext.algos.ppo.builders import build_ippo, build_mappo, build_vdppo
from marllib_ext.algos.ppo.learners import JointCriticPPOLearner, PPOLearner, VDPPOLearner

__all__ = [
    "A2CSettings",
    "JointCriticPPOLearner",
    "MAA2CSettings",
    "PPOLearner",
    "VDA2CSettings",
    "VDPPOLearner",
    "build_ia2c",
    "build_ippo",
    "build_maa2c",
    "build_mappo",
    "build_vda2c",
    "build_vdppo",
]
