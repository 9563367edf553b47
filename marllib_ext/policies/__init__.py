"""RLModules: the learner-only joint critic (actors are RLlib's default PPO modules)."""

from marllib_ext.policies.joint_critic import CRITIC_MODULE_ID, STATE, CentralValueCritic, mlp

__all__ = ["CRITIC_MODULE_ID", "STATE", "CentralValueCritic", "mlp"]
