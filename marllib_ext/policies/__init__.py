"""RLModules: learner-only joint critics (actors are RLlib's default PPO modules)."""

from marllib_ext.policies.joint_critic import CRITIC_MODULE_ID, STATE, CentralValueCritic, mlp
from marllib_ext.policies.vd_critic import AGENT_OBS, MIXERS, ValueDecompositionCritic

__all__ = [
    "AGENT_OBS",
    "CRITIC_MODULE_ID",
    "MIXERS",
    "STATE",
    "CentralValueCritic",
    "ValueDecompositionCritic",
    "mlp",
]
