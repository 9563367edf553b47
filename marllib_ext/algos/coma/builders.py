"""The ``coma`` config: the team's per-action critic spec and the joint-critic PPO config."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext.algos.coma.learner import COMALearner, COMASettings
from marllib_ext.algos.ppo.builders import build_joint_critic_ppo
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.policies.coma_critic import CounterfactualCritic


def coma_critic_spec(settings: Any, env: EnvHandle, agents: tuple[str, ...]) -> RLModuleSpec:
    """The team's ``Q(s, a_{-i}, i)`` with as many outputs as the team's largest
    ``Discrete`` action space."""
    layout = env.layout
    spaces = {agent: layout.action_spaces[agent] for agent in agents}
    if not all(isinstance(space, gym.spaces.Discrete) for space in spaces.values()):
        raise ConfigError(
            f"coma needs discrete actions (its critic outputs one Q per action); env "
            f"{env.name!r} has {sorted({str(s) for s in spaces.values()})}"
        )
    # Agents with fewer actions (simple_speaker_listener: 3 and 5) use the first outputs;
    # their policy puts no mass on the others, so the baseline ignores them.
    n_actions = max(int(space.n) for space in spaces.values())
    state_dim = int(layout.state_space.shape[0])
    return RLModuleSpec(
        module_class=CounterfactualCritic,
        learner_only=True,
        observation_space=layout.state_space,
        action_space=layout.action_spaces[agents[0]],
        model_config={
            "input_dim": state_dim + len(agents) * n_actions + len(agents),
            "n_actions": n_actions,
            "hiddens": list(settings.critic_hiddens),
            "activation": settings.critic_activation,
        },
    )


def build_coma(
    settings: COMASettings, env: EnvHandle, share_policy: str, seed: int | None
) -> PPOConfig:
    """COMA: A2C actors on the counterfactual advantage of a per-action central Q."""
    return build_joint_critic_ppo(
        settings,
        env,
        share_policy,
        seed,
        learner_class=COMALearner,
        critic_spec=lambda mapping, agents: coma_critic_spec(settings, env, agents),
    )
