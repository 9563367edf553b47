"""PPO-family builders: ``ippo`` (IL), ``mappo`` (CC) and ``vdppo`` (VD)."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import gymnasium as gym
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext.algos.config import (
    CentralCriticSettings,
    PPOSettings,
    VDSettings,
    learner_share,
)
from marllib_ext.algos.policy_sharing import PolicyMappingFn, policy_mapping
from marllib_ext.algos.ppo.learners import JointCriticPPOLearner, PPOLearner, VDPPOLearner
from marllib_ext.algos.ppo.novelty import with_rnd_module
from marllib_ext.envs.grid_space import grid_shape_of
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.policies.joint_critic import (
    ACTOR_MODULES,
    VALUE_NORM_BETA,
    CentralValueCritic,
    team_critic_ids,
)
from marllib_ext.policies.recurrent import recurrent_model_config
from marllib_ext.policies.vd_critic import ValueDecompositionCritic
from marllib_ext.postprocessing.block_batch import block_batch_options, joint_critic_block_batch
from marllib_ext.postprocessing.intrinsic_signals import NoveltyRecorder
from marllib_ext.rllib_compat.recurrent import RecurrentPPOCatalog

# With num_learners >= 2 every module is wrapped in torch DDP. The actors of joint-critic
# algorithms never use their value heads: a static graph lets DDP learn once which
# parameters get gradients instead of expecting every one in every backward pass.
DDP_KWARGS = {"static_graph": True}


def base_ppo_config(settings: PPOSettings, env: EnvHandle, *, seed: int | None) -> PPOConfig:
    """RLlib ``PPOConfig`` carrying the PPO core and sampling settings; the optimizer's
    ``lr`` and the epochs and minibatches come from the algorithm's schedule
    (:func:`marllib_ext.algos.ppo.phased.with_schedule`)."""
    return (
        PPOConfig()
        .environment(env.register_with_rllib(), env_config=dict(env.env_args))
        .env_runners(
            num_env_runners=settings.num_env_runners,
            num_envs_per_env_runner=settings.num_envs_per_env_runner,
            num_cpus_per_env_runner=settings.num_cpus_per_env_runner,
        )
        .learners(
            num_learners=settings.num_learners,
            num_gpus_per_learner=settings.num_gpus_per_learner,
        )
        .framework(torch_ddp_kwargs=DDP_KWARGS)
        # A crashed env runner is replaced and training goes on (RLlib's default, kept
        # explicit because our runs rely on it).
        .fault_tolerance(restart_failed_env_runners=True)
        .training(
            gamma=settings.gamma,
            lambda_=settings.lambda_,
            clip_param=settings.clip_param,
            entropy_coeff=settings.entropy_coeff,
            vf_loss_coeff=settings.vf_loss_coeff,
            vf_clip_param=settings.vf_clip_param,
            use_kl_loss=settings.use_kl_loss,
            kl_coeff=settings.kl_coeff,
            kl_target=settings.kl_target,
            grad_clip=settings.grad_clip,
            grad_clip_by="global_norm",
            # train_batch_size: env steps of the whole iteration; each learner its share.
            train_batch_size_per_learner=learner_share(
                settings.train_batch_size, settings.num_learners
            ),
        )
        .debugging(seed=seed)
    )


def actor_model_config(
    settings: PPOSettings, *, value_head_used: bool = True
) -> DefaultModelConfig | dict:
    """RLlib's PPO model config of an actor; with ``use_rnn``, RLlib's recurrent encoder
    of ``rnn_type`` (a dict: the layer type is not a ``DefaultModelConfig`` field).
    ``value_head_used`` false (joint-critic actors): a recurrent actor shares its encoder
    with the unused value head rather than run a second recurrent layer."""
    config = DefaultModelConfig(
        fcnet_hiddens=list(settings.actor_hiddens),
        fcnet_activation=settings.actor_activation,
        vf_share_layers=settings.vf_share_layers or not value_head_used,
        free_log_std=settings.free_log_std,
    )
    if not settings.use_rnn:
        return dataclasses.replace(config, vf_share_layers=settings.vf_share_layers)
    return {
        **dataclasses.asdict(config),
        **recurrent_model_config(settings.rnn_type, settings.rnn_hidden_dim, settings.max_seq_len),
    }


def actor_spec(settings: PPOSettings, *, value_head_used: bool = True) -> RLModuleSpec:
    """An actor module's spec: RLlib's default PPO module (recurrent with ``use_rnn``)."""
    config = actor_model_config(settings, value_head_used=value_head_used)
    if settings.use_rnn:
        return RLModuleSpec(model_config=config, catalog_class=RecurrentPPOCatalog)
    return RLModuleSpec(model_config=config)


def build_ippo(
    settings: PPOSettings, env: EnvHandle, share_policy: str, seed: int | None
) -> PPOConfig:
    """Independent PPO: RLlib's PPO, each policy with its own value head and GAE."""
    config = base_ppo_config(settings, env, seed=seed).learners(learner_class=PPOLearner)
    if not env.is_multi_agent:
        if settings.use_rnn:
            return config.rl_module(rl_module_spec=actor_spec(settings))
        return config.rl_module(model_config=actor_model_config(settings))
    mapping = policy_mapping(env, share_policy)
    policies = sorted(set(mapping.values()))
    return config.multi_agent(
        policies=policies, policy_mapping_fn=PolicyMappingFn(mapping)
    ).rl_module(
        rl_module_spec=MultiRLModuleSpec(
            rl_module_specs={pid: actor_spec(settings) for pid in policies}
        )
    )


def recurrent_critic_config(settings: CentralCriticSettings) -> dict:
    """A joint critic's model-config entries with ``critic_use_rnn`` (none without)."""
    if not settings.critic_use_rnn:
        return {}
    return {
        "rnn_type": settings.rnn_type,
        "rnn_hidden_dim": settings.rnn_hidden_dim,
        "max_seq_len": settings.max_seq_len,
    }


def central_critic_spec(
    settings: CentralCriticSettings,
    env: EnvHandle,
    *,
    extra_inputs: int = 0,
    cost_head: bool = False,
) -> RLModuleSpec:
    """Central ``V(s)`` module; ``extra_inputs`` widens its input (EFX appends z);
    ``cost_head`` adds the cost value ``V_c(s)`` (safe MARL); ``critic_use_rnn`` makes
    it recurrent (``rnn_type``, ``rnn_hidden_dim``, ``max_seq_len``)."""
    state_space = env.layout.state_space
    if settings.critic_use_rnn and cost_head:
        raise ConfigError(
            "critic_use_rnn: the safe-MARL critics (with a cost head) are feed-forward yet: false"
        )
    grid = critic_grid_stack(settings, env, extra_inputs) if settings.encoder == "cnn" else {}
    return RLModuleSpec(
        module_class=CentralValueCritic,
        learner_only=True,
        observation_space=state_space,
        # Unused by the critic; RLModuleSpec requires one.
        action_space=env.layout.action_spaces[env.layout.agents[0]],
        model_config={
            "state_dim": int(state_space.shape[0]) + extra_inputs,
            "hiddens": list(settings.critic_hiddens),
            "activation": settings.critic_activation,
            "cost_head": cost_head,
            VALUE_NORM_BETA: settings.value_norm_beta if settings.value_norm else None,
            "feature_norm": settings.feature_norm,
            **recurrent_critic_config(settings),
            **grid,
        },
    )


def critic_grid_stack(settings: CentralCriticSettings, env: EnvHandle, extra_inputs: int) -> dict:
    """The joint critic's CNN entries (``grid_stack``, ``conv_filters``) under
    ``encoder: cnn``: its state must be every agent's grid, of one shape, and nothing
    else (``ConfigError`` otherwise)."""
    layout = env.layout
    grids = {grid_shape_of(layout.plain_observation_space(a)) for a in layout.agents}
    state_dim = int(layout.state_space.shape[0]) + extra_inputs
    grid = next(iter(grids)) if len(grids) == 1 else None
    if grid is None or settings.critic_use_rnn or state_dim != len(layout.agents) * math.prod(grid):
        raise ConfigError(
            f"encoder: cnn on the joint critic needs its state to be every agent's grid of "
            f"one shape, feed-forward (env {env.name!r}: grids {sorted(map(str, grids))}, "
            f"state of {state_dim} values for {len(layout.agents)} agents)"
        )
    return {
        "grid_stack": [len(layout.agents), *grid],
        "conv_filters": [list(layer) for layer in settings.conv_filters],
    }


def vd_critic_spec(
    settings: VDSettings,
    env: EnvHandle,
    mapping: dict[str, str],
    agents: tuple[str, ...] | None = None,
    *,
    extra_inputs: int = 0,
) -> RLModuleSpec:
    """Per-agent value heads (one per actor policy) of ``agents`` (a team; default every
    agent) mixed by ``settings.mixer`` on the global state.

    ``extra_inputs`` widens the state and every agent's observation (EFX's z)."""
    layout = env.layout
    agents = layout.agents if agents is None else agents
    grids = vd_head_grids(settings, env, agents, extra_inputs) if settings.encoder == "cnn" else {}
    return RLModuleSpec(
        module_class=ValueDecompositionCritic,
        learner_only=True,
        observation_space=layout.state_space,
        action_space=layout.action_spaces[layout.agents[0]],
        model_config={
            "head_of_agent": [mapping[agent] for agent in agents],
            "obs_dims": [
                gym.spaces.flatdim(layout.plain_observation_space(agent)) + extra_inputs
                for agent in agents
            ],
            "state_dim": int(layout.state_space.shape[0]) + extra_inputs,
            "hiddens": list(settings.critic_hiddens),
            "activation": settings.critic_activation,
            "mixer": settings.mixer,
            "mixer_embed_dim": settings.mixer_embed_dim,
            "hypernet_embed_dim": settings.hypernet_embed_dim,
            **recurrent_critic_config(settings),
            **grids,
        },
    )


def vd_head_grids(
    settings: VDSettings, env: EnvHandle, agents: tuple[str, ...], extra_inputs: int
) -> dict:
    """The VD critic's CNN entries (``agent_grids``, ``conv_filters``) under ``encoder:
    cnn``: every agent's observation a grid, nothing appended, heads feed-forward."""
    grids = [grid_shape_of(env.layout.plain_observation_space(a)) for a in agents]
    if any(g is None for g in grids) or extra_inputs or settings.critic_use_rnn:
        raise ConfigError(
            f"encoder: cnn on the value-decomposition critic needs every agent's "
            f"observation to be a grid, nothing appended to it, and feed-forward heads "
            f"(env {env.name!r}, critic_use_rnn {settings.critic_use_rnn})"
        )
    return {
        "agent_grids": [list(g) for g in grids],
        "conv_filters": [list(layer) for layer in settings.conv_filters],
    }


def build_joint_critic_ppo(
    settings: CentralCriticSettings,
    env: EnvHandle,
    share_policy: str,
    seed: int | None,
    *,
    learner_class: type[JointCriticPPOLearner],
    critic_spec: Callable[[dict[str, str], tuple[str, ...]], RLModuleSpec],
) -> PPOConfig:
    """PPO actors (value heads unused) plus one learner-only joint critic module per
    team (``critic_spec(mapping, team_agents)``): ``joint_critic`` on a one-team env,
    ``joint_critic_<team>`` for each team of a mixed env."""
    refusal = recurrent_critic_refusal(learner_class.advantage_connector_class)
    if settings.critic_use_rnn and refusal:
        raise ConfigError(f"critic_use_rnn: {refusal}: false")
    mapping = policy_mapping(env, share_policy)
    policies = sorted(set(mapping.values()))
    teams = env.layout.teams
    critic_ids = team_critic_ids(teams)
    critics = {}
    for team, agents in teams.items():
        team_policies = sorted({mapping[agent] for agent in agents})
        for pid in team_policies:
            others = sorted(
                {t for t, a in teams.items() if t != team and pid in {mapping[x] for x in a}}
            )
            if others:
                raise ConfigError(
                    f"share_policy={share_policy!r} gives policy {pid!r} agents of teams "
                    f"{[team, *others]} of env {env.name!r}; a joint critic needs one team "
                    "per policy (use 'group' or 'individual')"
                )
        spec = critic_spec(mapping, agents)
        spec.model_config[ACTOR_MODULES] = team_policies
        critics[critic_ids[team]] = spec
    return (
        base_ppo_config(settings, env, seed=seed)
        .training(use_critic=False)
        .learners(learner_class=learner_class)
        .multi_agent(
            policies=sorted(set(policies) | set(critics)),
            policy_mapping_fn=PolicyMappingFn(mapping),
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    **{pid: actor_spec(settings, value_head_used=False) for pid in policies},
                    **critics,
                }
            )
        )
    )


def recurrent_critic_refusal(connector_class: type) -> str | None:
    """Why the critic of ``connector_class``'s family cannot be recurrent (``None``: it
    can): HAPPO's factor M indexes the critic's rows one per step, and COMA's critic
    has its own batch builder (the safe-MARL cost head is refused by its spec)."""
    if block_batch_options(connector_class).get("team_rows", False):
        return "HAPPO's and HATRPO's factor M reads the critic's rows step by step"
    if connector_class.block_builder is not joint_critic_block_batch:
        return "this family's critic has its own batch and stays feed-forward"
    return None


def build_mappo(
    settings: CentralCriticSettings,
    env: EnvHandle,
    share_policy: str,
    seed: int | None,
    *,
    learner_class: type[JointCriticPPOLearner] = JointCriticPPOLearner,
    extra_inputs: int = 0,
) -> PPOConfig:
    """MAPPO: decentralized actors, one learner-only central critic on the global state
    (with ``intrinsic_bonus_coeff > 0``, a novelty bonus added to the team reward)."""
    config = build_joint_critic_ppo(
        settings,
        env,
        share_policy,
        seed,
        learner_class=learner_class,
        critic_spec=lambda mapping, agents: central_critic_spec(
            settings, env, extra_inputs=extra_inputs
        ),
    )
    return with_novelty_bonus(config, settings, env, seed)


def with_novelty_bonus(config: PPOConfig, settings, env: EnvHandle, seed: int | None):
    """With ``intrinsic_bonus_coeff > 0``: the env runners record the bonus signal
    (``NoveltyRecorder``) and RND's module joins where the signal is ``rnd``; the
    joint-critic batch adds it to the team reward (``BlockHooks.block_reward_bonus``)."""
    if getattr(settings, "intrinsic_bonus_coeff", 0.0) > 0:
        with_rnd_module(config, settings, env, seed, [list(env.layout.agents)])
        config.env_runners(
            env_to_module_connector=functools.partial(
                novelty_recorder_factory, settings=settings, seed=seed
            )
        )
    return config


def novelty_recorder_factory(env, spaces, device, *, settings, seed):
    return [NoveltyRecorder(settings=settings, seed=seed)]


def build_vdppo(
    settings: VDSettings,
    env: EnvHandle,
    share_policy: str,
    seed: int | None,
    *,
    learner_class: type[JointCriticPPOLearner] = VDPPOLearner,
    extra_inputs: int = 0,
) -> PPOConfig:
    """VDPPO: decentralized actors, team GAE on V_tot mixed from per-agent values (with
    ``intrinsic_bonus_coeff > 0``, a novelty bonus added to the team reward)."""
    config = build_joint_critic_ppo(
        settings,
        env,
        share_policy,
        seed,
        learner_class=learner_class,
        critic_spec=lambda mapping, agents: vd_critic_spec(
            settings, env, mapping, agents, extra_inputs=extra_inputs
        ),
    )
    return with_novelty_bonus(config, settings, env, seed)
