"""The ``iql`` / ``vdn`` / ``qmix`` configs: one ``QAgentRLModule`` per policy of the
sharing mode (epsilon-greedy on MARLlib's schedule) with its target copy, and one
learner-only mixer module per team carrying the algorithm's mixer."""

from __future__ import annotations

import dataclasses
import functools

import gymnasium as gym
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext.algos.encoders import agent_grid_shapes
from marllib_ext.algos.joint_q.learners import IQLLearner, JointQLearner, QMIXLearner, VDNLearner
from marllib_ext.algos.joint_q.settings import JointQSettings
from marllib_ext.algos.policy_sharing import policy_mapping
from marllib_ext.algos.team_replay.specs import (
    TeamReplayConfig,
    mixer_specs,
    team_module_ids,
    team_replay_config,
)
from marllib_ext.envs.agent_inputs import AGENT_ID_ARG, LAST_ACTION_ARG
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.policies.q_agent import MIXER_MODULE_ID, QAgentRLModule, target_module_id


def check_discrete(env: EnvHandle, algo: str) -> None:
    """Joint Q-learning needs discrete actions and flat (Box) observations."""
    for agent in env.layout.agents:
        space = env.layout.action_spaces[agent]
        if not isinstance(space, gym.spaces.Discrete):
            raise ConfigError(
                f"{algo} needs discrete actions, and agent {agent!r} of env {env.name!r} has "
                f"{space}; for continuous actions use iddpg, maddpg or facmac"
            )
        if not isinstance(env.layout.plain_observation_space(agent), gym.spaces.Box):
            raise ConfigError(
                f"{algo} needs Box observations; agent {agent!r} of env {env.name!r} has "
                f"{env.layout.plain_observation_space(agent)}"
            )


def with_agent_inputs(env: EnvHandle, settings: JointQSettings) -> EnvHandle:
    """``env`` whose observations carry the agent's id and last action where the
    settings ask for them (``envs.agent_inputs``: env arguments, so the runners, the
    stored episodes and evaluation see the same inputs)."""
    extra = {AGENT_ID_ARG: True} if settings.obs_agent_id else {}
    if settings.obs_last_action:
        extra[LAST_ACTION_ARG] = True
    if not extra:
        return env
    return dataclasses.replace(env, env_args={**env.env_args, **extra})


def agent_grid(settings: JointQSettings, env: EnvHandle, agent: str) -> dict:
    """An agent network's CNN entries under ``encoder: cnn`` (``grid``, ``conv_filters``);
    ``ConfigError`` where the agent's observation is not a grid."""
    if settings.encoder != "cnn":
        return {}
    (grid,) = agent_grid_shapes(env, [agent])
    return {"grid": list(grid), "conv_filters": [list(layer) for layer in settings.conv_filters]}


def build_joint_q(
    settings: JointQSettings,
    env: EnvHandle,
    share_policy: str,
    seed: int | None,
    *,
    algo: str,
    mixer: str,
    learner_class: type[JointQLearner],
) -> TeamReplayConfig:
    """The RLlib config of a joint-Q algorithm: ``mixer`` (``none`` | ``vdn`` |
    ``qmix``) and ``learner_class`` are the algorithm's."""
    check_discrete(env, algo)
    env = with_agent_inputs(env, settings)
    layout = env.layout
    mapping = policy_mapping(env, share_policy)
    agent_model = {
        "hiddens": list(settings.hiddens),
        "activation": settings.activation,
        "use_rnn": settings.use_rnn,
        "rnn_hidden_dim": settings.rnn_hidden_dim,
        "epsilon_start": settings.initial_epsilon,
        "epsilon_end": settings.final_epsilon,
        "epsilon_timesteps": settings.epsilon_timesteps,
    }
    specs: dict[str, RLModuleSpec] = {}
    for policy in sorted(set(mapping.values())):
        first = next(a for a in sorted(layout.agents) if mapping[a] == policy)
        spaces = {
            "observation_space": layout.observation_spaces[first],
            "action_space": layout.action_spaces[first],
        }
        model = {**agent_model, **agent_grid(settings, env, first)}
        specs[policy] = RLModuleSpec(module_class=QAgentRLModule, model_config=model, **spaces)
        specs[target_module_id(policy)] = RLModuleSpec(
            module_class=QAgentRLModule, model_config=model, learner_only=True, **spaces
        )
    team_ids = team_module_ids(env, MIXER_MODULE_ID)
    specs.update(
        mixer_specs(
            env,
            team_ids,
            mixer,
            settings.mixer_embed_dim,
            settings.hypernet_embed_dim,
            state_normalize=settings.state_normalize,
            init_scale=settings.mixer_init_scale,
            reward_running_moments=settings.running_reward_moments,
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
        lr=settings.lr,
    )


build_iql = functools.partial(build_joint_q, algo="iql", mixer="none", learner_class=IQLLearner)
build_vdn = functools.partial(build_joint_q, algo="vdn", mixer="vdn", learner_class=VDNLearner)
build_qmix = functools.partial(build_joint_q, algo="qmix", mixer="qmix", learner_class=QMIXLearner)
