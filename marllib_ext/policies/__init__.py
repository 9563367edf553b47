"""RLModules: learner-only joint critics (actors are RLlib's default PPO modules)."""

from marllib_ext.policies.joint_critic import (
    ACTOR_MODULES,
    CRITIC_MODULE_ID,
    STATE,
    CentralValueCritic,
    critic_module_id,
    is_critic_module,
    mlp,
)
from marllib_ext.policies.vd_critic import AGENT_OBS, MIXERS, ValueDecompositionCritic

__all__ = [
    "ACTOR_MODULES",
    "AGENT_OBS",
    "critic_module_id",
    "is_critic_module",
    "CRITIC_MODULE_ID",
    "MIXERS",
    "STATE",
    "CentralValueCritic",
    "ValueDecompositionCritic",
    "mlp",
]
