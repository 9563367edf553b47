"""The ``masac`` / ``hasac`` configs: one ``SoftActorRLModule`` per policy (no target
copy: the soft targets use the current policies) and one learner-only
``SoftTeamCritic`` per team, which keys the team's replayed batch."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext.algos.masac.learners import HASACLearner, MASACLearner
from marllib_ext.algos.masac.settings import MASACSettings
from marllib_ext.algos.policy_sharing import policy_mapping
from marllib_ext.algos.team_replay.specs import (
    TeamReplayConfig,
    team_module_ids,
    team_replay_config,
)
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.policies.soft_actor import SoftActorRLModule, SoftTeamCritic

TEAM_MODULE = "soft_critic"


def action_width(space: gym.Space) -> int:
    """An action's width in the critic's input: a Box's size, a Discrete's one-hot."""
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    raise ConfigError(f"soft actor-critics need Box or Discrete actions, got {space}")


def build_soft_actor_critic(
    settings: MASACSettings,
    env: EnvHandle,
    share_policy: str,
    seed: int | None,
    *,
    algo: str,
    learner_class: type[MASACLearner],
    team_temperature: bool,
) -> TeamReplayConfig:
    """The RLlib config of ``masac`` or ``hasac`` (``team_temperature``: HASAC's critic
    temperature)."""
    layout = env.layout
    mapping = policy_mapping(env, share_policy)
    agents = tuple(sorted(layout.agents))
    spaces = [layout.action_spaces[a] for a in agents]
    if len({isinstance(s, gym.spaces.Box) for s in spaces}) > 1:
        raise ConfigError(f"{algo}: every agent needs continuous, or every agent discrete, actions")
    width = max(action_width(s) for s in spaces)
    actor_model = {
        "hiddens": list(settings.actor_hiddens),
        "activation": settings.activation,
        "input_norm": settings.input_norm,
        "final_activation": settings.actor_final_activation,
        "initial_alpha": settings.initial_alpha,
    }
    specs: dict[str, RLModuleSpec] = {}
    for policy in sorted(set(mapping.values())):
        first = next(a for a in agents if mapping[a] == policy)
        specs[policy] = RLModuleSpec(
            module_class=SoftActorRLModule,
            model_config=actor_model,
            observation_space=layout.observation_spaces[first],
            action_space=layout.action_spaces[first],
        )
    state_dim = int(layout.state_space.shape[0])
    team_ids = team_module_ids(env, TEAM_MODULE)
    for team, module_id in team_ids.items():
        specs[module_id] = RLModuleSpec(
            module_class=SoftTeamCritic,
            learner_only=True,
            observation_space=layout.state_space,
            action_space=layout.action_spaces[layout.teams[team][0]],
            model_config={
                "input_dim": state_dim + width * len(layout.teams[team]),
                "hiddens": list(settings.critic_hiddens),
                "activation": settings.activation,
                "twin_q": True,
                "team_temperature": team_temperature,
                "initial_alpha": settings.initial_alpha,
            },
        )
    return team_replay_config(
        settings,
        env,
        mapping,
        specs,
        team_ids,
        seed,
        learner_class=learner_class,
        grad_clip=settings.grad_clip,
    )


build_masac = functools.partial(
    build_soft_actor_critic, algo="masac", learner_class=MASACLearner, team_temperature=False
)
build_hasac = functools.partial(
    build_soft_actor_critic, algo="hasac", learner_class=HASACLearner, team_temperature=True
)
