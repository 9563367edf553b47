"""The RLlib side of a team-replay algorithm: its config class, the team modules'
specs, and the agent/team layout every learner and the algorithm read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext.algos.policy_sharing import PolicyMappingFn
from marllib_ext.algos.team_replay.algorithm import LAYOUT_KEY, TeamReplayConfig
from marllib_ext.algos.team_replay.settings import TeamReplaySettings
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.policies.q_agent import TARGET_PREFIX, JointQMixer
from marllib_ext.rllib_compat import (
    skip_end_of_iteration_runner_sync,
    with_learner_value,
    with_settings,
)
from marllib_ext.rollout.team_episodes import TeamEpisodeEnvRunner
from marllib_ext.rollout.whole_episodes import COMPLETE_EPISODES


def team_replay_layout(
    agents: tuple[str, ...],
    mapping: Mapping[str, str],
    obs_dim_of: Mapping[str, int],
    team_modules: Mapping[str, list[str]],
) -> dict[str, Any]:
    """What learners and the algorithm need to know: sorted agents, their policies and
    observation sizes, and each team module's agent indices."""
    return {
        "agents": tuple(agents),
        "policy_of": {a: mapping[a] for a in agents},
        "obs_dim_of": dict(obs_dim_of),
        "teams": {mid: [agents.index(a) for a in members] for mid, members in team_modules.items()},
    }


def team_module_ids(env: EnvHandle, prefix: str) -> dict[str, str]:
    """Team -> the id of its learner-only team module: ``prefix`` on a one-team env,
    ``<prefix>_<team>`` per team of a mixed env."""
    teams = env.layout.teams
    return {team: prefix if len(teams) == 1 else f"{prefix}_{team}" for team in teams}


def mixer_specs(
    env: EnvHandle,
    team_ids: Mapping[str, str],
    mixer: str,
    embed_dim: int,
    hypernet_dim: int,
    *,
    state_normalize: bool,
    init_scale: float | None = None,
    twin: bool = False,
    reward_running_moments: bool = False,
) -> dict[str, RLModuleSpec]:
    """One learner-only ``JointQMixer`` (``none`` | ``vdn`` | ``qmix``) per team: the
    module every team's replayed batch is keyed by (``twin``: with twin hypernetworks;
    ``reward_running_moments``: it keeps the running reward moments)."""
    layout = env.layout
    return {
        module_id: RLModuleSpec(
            module_class=JointQMixer,
            learner_only=True,
            observation_space=layout.state_space,
            action_space=layout.action_spaces[layout.agents[0]],
            model_config={
                "mixer": mixer,
                "n_agents": len(layout.teams[team]),
                "state_dim": int(layout.state_space.shape[0]),
                "mixer_embed_dim": embed_dim,
                "hypernet_embed_dim": hypernet_dim,
                "state_normalize": state_normalize,
                "mixer_init_scale": init_scale,
                "twin": twin,
                "reward_running_moments": reward_running_moments,
            },
        )
        for team, module_id in team_ids.items()
    }


def team_replay_config(
    settings: TeamReplaySettings,
    env: EnvHandle,
    mapping: Mapping[str, str],
    specs: Mapping[str, RLModuleSpec],
    team_ids: Mapping[str, str],
    seed: int | None,
    *,
    learner_class: type,
    grad_clip: float | None,
    lr: float | None = None,
) -> TeamReplayConfig:
    """A ``TeamReplayConfig`` training ``learner_class``, sampling complete episodes
    with ``specs`` (actors mapped by ``mapping``, learner-only modules), carrying the
    settings and the agent/team layout every learner and the algorithm read."""
    agents = tuple(sorted(env.layout.agents))
    obs_dim_of = {a: int(np.prod(env.layout.plain_observation_space(a).shape)) for a in agents}
    teams = env.layout.teams
    layout = team_replay_layout(
        agents, mapping, obs_dim_of, {team_ids[team]: members for team, members in teams.items()}
    )
    config = (
        TeamReplayConfig()
        .training(
            gamma=settings.gamma,
            grad_clip=grad_clip,
            grad_clip_by="global_norm",
            **({} if lr is None else {"lr": lr}),
        )
        .environment(
            env.register_with_rllib(),
            env_config=dict(env.env_args),
            # The actors act within the env's bounds (squashed into [low, high]), as
            # the uniformly random warm-up actions do: the env takes them unchanged.
            normalize_actions=False,
            clip_actions=False,
        )
        .env_runners(
            num_env_runners=settings.num_env_runners,
            num_envs_per_env_runner=settings.num_envs_per_env_runner,
            num_cpus_per_env_runner=settings.num_cpus_per_env_runner,
            # Whole team episodes without RLlib's bias toward short ones, from the
            # batched rollout's arrays where it can (rollout/team_episodes).
            batch_mode=COMPLETE_EPISODES,
            env_runner_cls=TeamEpisodeEnvRunner,
        )
        .learners(
            num_learners=settings.num_learners,
            num_gpus_per_learner=settings.num_gpus_per_learner,
            learner_class=learner_class,
        )
        .fault_tolerance(restart_failed_env_runners=True)
        .multi_agent(
            policies=sorted(specs),
            policy_mapping_fn=PolicyMappingFn(mapping),
            policies_to_train=[mid for mid in specs if not mid.startswith(TARGET_PREFIX)],
        )
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=dict(specs)))
        .debugging(seed=seed)
    )
    if settings.overlap_sampling:  # the training step syncs the runners itself
        skip_end_of_iteration_runner_sync(config)
    return with_learner_value(with_settings(config, settings), LAYOUT_KEY, layout)
