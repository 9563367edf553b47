"""Config builders: ``sac_roer`` (single-agent gymnasium envs) and ``isac_roer``
(independent SAC, multi-agent)."""

from __future__ import annotations

import gymnasium as gym
from ray.rllib.algorithms.sac import SACConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext.algos.config import learner_share
from marllib_ext.algos.policy_sharing import PolicyMappingFn, policy_mapping
from marllib_ext.algos.roer.algorithm import ROERSAC
from marllib_ext.algos.roer.learner import ROERSACLearner
from marllib_ext.algos.roer.settings import ROERSettings
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.policies.roer_sac import ROERSACTorchRLModule


def _replay_buffer_config(settings: ROERSettings, multi_agent: bool) -> dict:
    prefix = "MultiAgent" if multi_agent else ""
    capacity = settings.buffer_capacity
    rule = settings.priority_rule
    if not rule.prioritized:
        return {"type": f"{prefix}EpisodeReplayBuffer", "capacity": capacity}
    # KL / JS: SACConfig.validate accepts only RLlib's buffer names; ROERSAC swaps in
    # the ROER subclass of this type when the buffer is built.
    return {
        "type": f"{prefix}PrioritizedEpisodeReplayBuffer",
        "capacity": capacity,
        "alpha": rule.sampling_alpha(settings),
        "beta": rule.importance_beta(settings),
    }


def _module_spec(settings: ROERSettings) -> RLModuleSpec:
    return RLModuleSpec(
        module_class=ROERSACTorchRLModule,
        model_config={
            **vars(
                DefaultModelConfig(
                    fcnet_hiddens=list(settings.hiddens),
                    fcnet_activation=settings.activation,
                )
            ),
            "value_hiddens": list(settings.hiddens),
            "value_activation": settings.activation,
            "q_network": settings.q_network,
        },
    )


def _base_config(settings: ROERSettings, env: EnvHandle, seed: int | None) -> SACConfig:
    config = (
        SACConfig(algo_class=ROERSAC)
        .environment(env.register_with_rllib(), env_config=dict(env.env_args))
        .env_runners(
            num_env_runners=settings.num_env_runners,
            num_envs_per_env_runner=settings.num_envs_per_env_runner,
            rollout_fragment_length=settings.rollout_fragment_length,
        )
        .learners(
            num_learners=settings.num_learners,
            num_gpus_per_learner=settings.num_gpus_per_learner,
            learner_class=ROERSACLearner,
        )
        .training(
            gamma=settings.gamma,
            actor_lr=settings.actor_lr,
            critic_lr=settings.critic_lr,
            alpha_lr=settings.alpha_lr,
            tau=settings.tau,
            initial_alpha=settings.initial_alpha,
            n_step=settings.n_step,
            twin_q=settings.twin_q,
            # train_batch_size: rows of one update of the whole iteration; each learner
            # its share.
            train_batch_size_per_learner=learner_share(
                settings.train_batch_size, settings.num_learners
            ),
            num_steps_sampled_before_learning_starts=(
                settings.num_steps_sampled_before_learning_starts
            ),
            training_intensity=settings.training_intensity,
            replay_buffer_config=_replay_buffer_config(settings, env.is_multi_agent),
        )
        .debugging(seed=seed)
    )
    if settings.fast_replay:  # the learner checks the gradients in one fused pass
        config.framework(torch_skip_nan_gradients=True)
    return config


def build_sac_roer(
    settings: ROERSettings, env: EnvHandle, share_policy: str, seed: int | None
) -> SACConfig:
    """SAC with ROER replay on a single-agent gymnasium env."""
    if env.is_multi_agent:
        raise ConfigError(f"{env.name!r} is multi-agent; sac_roer is single-agent (use isac_roer)")
    return _base_config(settings, env, seed).rl_module(rl_module_spec=_module_spec(settings))


def build_isac_roer(
    settings: ROERSettings, env: EnvHandle, share_policy: str, seed: int | None
) -> SACConfig:
    """Independent SAC with ROER replay: one SAC module per policy of the sharing mode,
    each with its own priorities in RLlib's multi-agent buffer."""
    if not env.is_multi_agent:
        raise ConfigError(f"{env.name!r} is a single-agent env; use sac_roer")
    mapping = policy_mapping(env, share_policy)
    for agent in env.layout.agents:
        if not isinstance(env.layout.action_spaces[agent], gym.spaces.Box | gym.spaces.Discrete):
            raise ConfigError(f"agent {agent!r}: isac_roer needs Box or Discrete actions")
    policies = sorted(set(mapping.values()))
    return (
        _base_config(settings, env, seed)
        .multi_agent(policies=policies, policy_mapping_fn=PolicyMappingFn(mapping))
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={pid: _module_spec(settings) for pid in policies}
            )
        )
    )
