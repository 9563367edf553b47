"""The ``iddpg`` / ``maddpg`` / ``facmac`` configs: one ``DeterministicActorRLModule``
per policy (Gaussian noise) with its target copy, one learner-only ``DDPGCritic`` per
policy (its input set by the algorithm), and one team module per team (FACMAC's mixer;
for the others a mixer-less module that keys the team batch)."""

from __future__ import annotations

import functools

import numpy as np
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext.algos.ddpg.learners import (
    DDPGLearner,
    FACMACLearner,
    IDDPGLearner,
    MADDPGLearner,
)
from marllib_ext.algos.ddpg.settings import DDPGSettings
from marllib_ext.algos.policy_sharing import policy_mapping
from marllib_ext.algos.team_replay.specs import (
    TeamReplayConfig,
    mixer_specs,
    team_module_ids,
    team_replay_config,
)
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.policies.ddpg import DDPGCritic, DeterministicActorRLModule, critic_module_id
from marllib_ext.policies.q_agent import target_module_id

TEAM_MODULE = "ddpg_team"


def build_ddpg(
    settings: DDPGSettings,
    env: EnvHandle,
    share_policy: str,
    seed: int | None,
    *,
    algo: str,
    central_critic: bool,
    mixer: str,
    learner_class: type[DDPGLearner],
) -> TeamReplayConfig:
    """The RLlib config of a DDPG-family algorithm (the registry's ``check_env`` has
    refused discrete action spaces): ``central_critic`` critics read ``(s, a_team)``,
    the others ``(o_i, a_i)``; ``mixer`` (``none`` unless FACMAC) mixes per team."""
    layout = env.layout
    mapping = policy_mapping(env, share_policy)
    agents = tuple(sorted(layout.agents))
    obs_dim_of = {a: int(np.prod(layout.observation_spaces[a].shape)) for a in agents}
    action_dim_of = {a: int(np.prod(layout.action_spaces[a].shape)) for a in agents}
    teams = layout.teams
    team_of = {a: team for team, members in teams.items() for a in members}
    state_dim = int(layout.state_space.shape[0])
    actor_model = {
        "hiddens": list(settings.actor_hiddens),
        "activation": settings.activation,
        "exploration_noise": settings.exploration_noise,
    }
    specs: dict[str, RLModuleSpec] = {}
    for policy in sorted(set(mapping.values())):
        first = next(a for a in agents if mapping[a] == policy)
        spaces = {
            "observation_space": layout.observation_spaces[first],
            "action_space": layout.action_spaces[first],
        }
        specs[policy] = RLModuleSpec(
            module_class=DeterministicActorRLModule, model_config=actor_model, **spaces
        )
        specs[target_module_id(policy)] = RLModuleSpec(
            module_class=DeterministicActorRLModule,
            model_config=actor_model,
            learner_only=True,
            **spaces,
        )
        if central_critic:
            if any(team_of[a] != team_of[first] for a in agents if mapping[a] == policy):
                raise ConfigError(
                    f"{algo}: policy {policy!r} is shared by agents of several teams; each "
                    "team needs its own central critic (use share_policy=group)"
                )
            members = teams[team_of[first]]
            input_dim = state_dim + sum(action_dim_of[a] for a in members)
        else:
            input_dim = obs_dim_of[first] + action_dim_of[first]
        specs[critic_module_id(policy)] = RLModuleSpec(
            module_class=DDPGCritic,
            learner_only=True,
            model_config={
                "input_dim": input_dim,
                "hiddens": list(settings.critic_hiddens),
                "activation": settings.activation,
                "twin_q": settings.twin_q,
            },
            **spaces,
        )
    team_ids = team_module_ids(env, TEAM_MODULE)
    specs.update(
        mixer_specs(
            env,
            team_ids,
            mixer,
            settings.mixer_embed_dim,
            settings.hypernet_embed_dim,
            state_normalize=settings.state_normalize,
            twin=settings.twin_q,
        )
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


build_iddpg = functools.partial(
    build_ddpg, algo="iddpg", central_critic=False, mixer="none", learner_class=IDDPGLearner
)
build_maddpg = functools.partial(
    build_ddpg, algo="maddpg", central_critic=True, mixer="none", learner_class=MADDPGLearner
)


def build_facmac(settings, env, share_policy, seed):
    """FACMAC mixes with its settings' ``mixer`` (qmix, or vdn for FACMAC-vdn)."""
    return build_ddpg(
        settings,
        env,
        share_policy,
        seed,
        algo="facmac",
        central_critic=False,
        mixer=settings.mixer,
        learner_class=FACMACLearner,
    )
