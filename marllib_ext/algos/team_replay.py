"""Off-policy MARL on replayed team episodes: shared by joint Q-learning (``iql``,
``vdn``, ``qmix``) and the deterministic actor-critics (``iddpg``, ``maddpg``,
``facmac``).

Data flow:

1. Env runners act with the algorithm's agent modules and return complete episodes
   (``batch_mode="complete_episodes"``).
2. ``TeamReplayAlgorithm.training_step`` turns each ``MultiAgentEpisode`` into a
   time-aligned ``TeamEpisode`` (``team_episode``) and stores it in a
   ``TeamEpisodeStore`` (``replay/team_episodes.py`` says why not RLlib's buffer).
3. It samples team transitions (feed-forward agents) or whole episodes (GRU agents) and
   hands them to the learner as one batch under each team's module (``team_modules``).
4. The learner returns per-step TD errors; their ROER / PER priorities go back to the
   store (``priorities_of``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

from marllib_ext.algos.config import Check, Settings
from marllib_ext.algos.policy_sharing import PolicyMappingFn
from marllib_ext.algos.progress import ProgressColumn, read_number
from marllib_ext.algos.roer.settings import priority_checks
from marllib_ext.envs.adapter import STATE_KEY
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.ops.roer import js_priority, kl_priority, per_priority
from marllib_ext.policies.q_agent import TARGET_PREFIX, JointQMixer
from marllib_ext.replay.team_episodes import SampledTeamBatch, TeamEpisode, TeamEpisodeStore
from marllib_ext.rllib_compat import learner_value, settings_of, with_learner_value, with_settings

TD_ERRORS = "td_errors"  # learner result key: per-step TD errors, (B, L, groups)
PROGRESS_KEY = "team_replay"  # result[PROGRESS_KEY]: exploration, buffer size, TD error
LAYOUT_KEY = "team_replay_layout"  # learner_config_dict key of the agent/team layout
EPISODES_SAMPLED = "num_episodes_sampled_lifetime"  # timesteps key for target updates


@dataclass(frozen=True)
class TeamReplaySettings(Settings):
    """Replay, sampling and prioritization fields of every team-replay algorithm."""

    batch_episode: int
    gamma: float
    buffer_size: int
    training_intensity: float
    learning_starts: int | None
    per_type: str
    temp: float
    min_clip: float
    max_clip: float
    js_min_weight: float
    js_max_weight: float
    per_beta: float
    std_normalize: bool
    per_alpha: float
    per_importance_beta: float
    num_env_runners: int
    num_envs_per_env_runner: int
    num_cpus_per_env_runner: float
    num_learners: int
    num_gpus_per_learner: float

    def checks(self) -> list[Check]:
        return [
            (self.batch_episode > 0, "batch_episode", "must be > 0"),
            (0 <= self.gamma <= 1, "gamma", "must be in [0, 1]"),
            (self.buffer_size >= self.batch_episode, "buffer_size", "must be >= batch_episode"),
            (self.training_intensity > 0, "training_intensity", "must be > 0"),
            (
                self.learning_starts is None or self.learning_starts >= 1,
                "learning_starts",
                "null (batch_episode) or >= 1 episode",
            ),
            *priority_checks(self),
            (self.per_importance_beta >= 0, "per_importance_beta", "must be >= 0"),
            (
                self.num_learners <= 1,
                "num_learners",
                "team-replay algorithms train on one learner (0 or 1): their loss couples "
                "every agent network and the team's mixer or critics in one backward pass "
                "outside the modules' forward_train, which data-parallel (DDP) learners "
                "would not synchronize",
            ),
        ]

    @property
    def episodes_before_learning(self) -> int:
        return self.batch_episode if self.learning_starts is None else self.learning_starts

    @property
    def samples_whole_episodes(self) -> bool:
        """Recurrent agents train on whole episodes, feed-forward ones on transitions."""
        return bool(getattr(self, "use_rnn", False))

    def exploration_at(self, env_steps: int) -> float:
        """The exploration level at ``env_steps`` (epsilon, or the action-noise scale)."""
        raise NotImplementedError


# ---- episodes -> team episodes ------------------------------------------------------------
def team_episode(episode, agents: tuple[str, ...], obs_dim: int) -> TeamEpisode:
    """A finished ``MultiAgentEpisode`` as a time-aligned ``TeamEpisode``: row ``t`` of
    every array is env step ``t`` for every agent (agents in ``agents`` order,
    observations zero-padded to ``obs_dim``, the state from ``info["state"]``)."""
    if episode.env_t_started != 0:
        raise ValueError(
            f"episode {episode.id_!r} starts at env step {episode.env_t_started}; team "
            "replay stores whole episodes (batch_mode='complete_episodes')"
        )
    lengths = {aid: len(episode.agent_episodes[aid]) for aid in agents}
    if len(set(lengths.values())) != 1:
        raise ValueError(
            f"agents of episode {episode.id_!r} acted on different numbers of steps "
            f"{lengths}; team replay needs every agent to act on every env step"
        )
    length = next(iter(lengths.values()))
    obs = np.zeros((length + 1, len(agents), obs_dim), np.float32)
    rewards = np.zeros((length, len(agents)), np.float32)
    actions = []
    for index, aid in enumerate(agents):
        agent_episode = episode.agent_episodes[aid]
        agent_obs = np.asarray(agent_episode.get_observations(), np.float32)
        obs[:, index, : agent_obs[0].size] = agent_obs.reshape(length + 1, -1)
        rewards[:, index] = np.asarray(agent_episode.get_rewards(), np.float32)
        actions.append(np.asarray(agent_episode.get_actions()))
    infos = episode.agent_episodes[agents[0]].get_infos()
    state = np.stack([np.asarray(info[STATE_KEY], np.float32).reshape(-1) for info in infos])
    return TeamEpisode(
        obs=obs,
        state=state,
        actions=np.stack(actions, axis=1),
        rewards=rewards,
        terminated=bool(episode.is_terminated),
    )


def priorities_of(td_errors: np.ndarray, settings: TeamReplaySettings) -> np.ndarray:
    """Per-step priority from per-step TD errors ``(B, L, groups)`` (a team's TD error
    per team, or each agent's for independent learners): seed 003's rule (KL / JS) or
    PER's ``|delta|``, averaged over the groups -> ``(B, L)``."""
    td = torch.as_tensor(td_errors, dtype=torch.float64)
    flat = td.reshape(-1)
    if settings.per_type == "KL":
        priority, _ = kl_priority(
            flat,
            temp=settings.temp,
            min_clip=settings.min_clip,
            max_clip=settings.max_clip,
            normalize=settings.std_normalize,
        )
    elif settings.per_type == "JS":
        priority, _ = js_priority(
            flat,
            temp=settings.temp,
            max_clip=settings.max_clip,
            js_min_weight=settings.js_min_weight,
            js_max_weight=settings.js_max_weight,
            normalize=settings.std_normalize,
        )
    else:
        priority = per_priority(flat)
    return priority.reshape(td.shape).mean(dim=-1).numpy()


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


# ---- algorithm ----------------------------------------------------------------------------
class TeamReplayAlgorithm(Algorithm):
    """Samples complete episodes, stores team episodes, trains on replayed batches."""

    @override(Algorithm)
    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        settings: TeamReplaySettings = settings_of(self.config)
        self.replay_settings = settings
        layout = learner_value(self.config, LAYOUT_KEY)
        self.team_agents: tuple[str, ...] = tuple(layout["agents"])
        self.team_obs_dim = max(layout["obs_dim_of"].values())
        self.team_modules = list(layout["teams"])
        self.agent_policies = sorted(set(layout["policy_of"].values()))
        self.store = TeamEpisodeStore(
            settings.buffer_size,
            prioritized=settings.per_type != "uniform",
            alpha=settings.per_alpha if settings.per_type == "PER" else 1.0,
            importance_beta=settings.per_importance_beta,
            per_beta=settings.per_beta if settings.per_type in ("KL", "JS") else 1.0,
            seed=self.config.seed,
        )
        self.episodes_sampled = 0
        self.update_credit = 0.0
        self.last_td_error = float("nan")

    @override(Algorithm)
    def training_step(self) -> None:
        settings = self.replay_settings
        episodes, runner_results = synchronous_parallel_sample(
            worker_set=self.env_runner_group,
            concat=True,
            sample_timeout_s=self.config.sample_timeout_s,
            _uses_new_env_runners=True,
            _return_metrics=True,
        )
        self.metrics.aggregate(runner_results, key=ENV_RUNNER_RESULTS)
        for episode in episodes:
            self.store.add(team_episode(episode, self.team_agents, self.team_obs_dim))
        self.episodes_sampled += len(episodes)
        env_steps = self.metrics.peek(
            (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
        )

        self.update_credit += len(episodes) * settings.training_intensity
        updates = int(self.update_credit)
        self.update_credit -= updates
        if len(self.store) < settings.episodes_before_learning:
            updates = 0
        for _ in range(updates):
            sampled = self._sample()
            policy_batch = SampleBatch(sampled.columns())
            learner_results = self.learner_group.update(
                batch=MultiAgentBatch(
                    {mid: policy_batch for mid in self.team_modules},
                    env_steps=int(sampled.mask.sum()),
                ),
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps,
                    EPISODES_SAMPLED: self.episodes_sampled,
                },
            )
            # One learner, one item: this update's (B, L, groups) TD errors.
            logged = learner_results[0][self.team_modules[0]].pop(TD_ERRORS)
            td_errors = np.asarray(logged.peek()[-1])
            self.last_td_error = float(np.abs(td_errors).mean(-1)[sampled.mask > 0].mean())
            self.store.update_priorities(sampled, priorities_of(td_errors, settings))
            self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        if updates:
            self.env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group,
                policies=self.agent_policies,
                inference_only=True,
            )
        self.metrics.log_dict(
            {
                "exploration": settings.exploration_at(env_steps),
                "buffer_episodes": len(self.store),
                "episodes_sampled": self.episodes_sampled,
                "updates": updates,
                "td_error_abs": self.last_td_error,
            },
            key=PROGRESS_KEY,
            window=1,
        )

    def _sample(self) -> SampledTeamBatch:
        settings = self.replay_settings
        if settings.samples_whole_episodes:
            return self.store.sample_episodes(settings.batch_episode)
        # Feed-forward agents: as many single transitions as batch_episode episodes hold.
        mean_length = self.store.num_transitions / max(1, len(self.store))
        return self.store.sample_transitions(max(1, round(settings.batch_episode * mean_length)))

    @override(Algorithm)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        state = super().get_state(components, not_components=not_components, **kwargs)
        state["team_replay"] = {
            "store": self.store.get_state(),
            "episodes_sampled": self.episodes_sampled,
            "update_credit": self.update_credit,
        }
        return state

    @override(Algorithm)
    def set_state(self, state: dict) -> None:
        replay = state.get("team_replay")
        if replay is not None:
            self.store.set_state(replay["store"])
            self.episodes_sampled = int(replay["episodes_sampled"])
            self.update_credit = float(replay["update_credit"])
        super().set_state(state)


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
    twin: bool = False,
) -> dict[str, RLModuleSpec]:
    """One learner-only ``JointQMixer`` (``none`` | ``vdn`` | ``qmix``) per team: the
    module every team's replayed batch is keyed by (``twin``: with twin hypernetworks)."""
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
                "twin": twin,
            },
        )
        for team, module_id in team_ids.items()
    }


def team_replay_config(
    config: AlgorithmConfig,
    settings: TeamReplaySettings,
    env: EnvHandle,
    mapping: Mapping[str, str],
    specs: Mapping[str, RLModuleSpec],
    team_ids: Mapping[str, str],
    seed: int | None,
) -> AlgorithmConfig:
    """``config`` (a team-replay algorithm's config class) sampling complete episodes
    with ``specs`` (actors mapped by ``mapping``, learner-only modules), carrying the
    settings and the agent/team layout every learner and the algorithm read."""
    agents = tuple(sorted(env.layout.agents))
    obs_dim_of = {a: int(np.prod(env.layout.observation_spaces[a].shape)) for a in agents}
    teams = env.layout.teams
    layout = team_replay_layout(
        agents, mapping, obs_dim_of, {team_ids[team]: members for team, members in teams.items()}
    )
    config = (
        config.environment(env.register_with_rllib(), env_config=dict(env.env_args))
        .env_runners(
            num_env_runners=settings.num_env_runners,
            num_envs_per_env_runner=settings.num_envs_per_env_runner,
            num_cpus_per_env_runner=settings.num_cpus_per_env_runner,
            batch_mode="complete_episodes",
        )
        .learners(
            num_learners=settings.num_learners,
            num_gpus_per_learner=settings.num_gpus_per_learner,
        )
        .fault_tolerance(restart_failed_env_runners=True)
        .multi_agent(
            policies=set(specs),
            policy_mapping_fn=PolicyMappingFn(mapping),
            policies_to_train=[mid for mid in specs if not mid.startswith(TARGET_PREFIX)],
        )
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=dict(specs)))
        .debugging(seed=seed)
    )
    return with_learner_value(with_settings(config, settings), LAYOUT_KEY, layout)


# ---- progress -----------------------------------------------------------------------------
PROGRESS_COLUMNS = (
    ProgressColumn("replay_exploration", "explore", ".3f"),
    ProgressColumn("replay_buffer_episodes", "buffer", ".0f"),
    ProgressColumn("replay_td_error", "td", ".3f"),
    ProgressColumn("replay_q", "Q", ".2f"),
)


def progress(result: Mapping[str, Any]) -> dict[str, float]:
    """Exploration (epsilon or noise), episodes stored, mean |TD error| of the last
    update, and the mean Q of the replayed batch (``Q_tot`` per team, averaged)."""
    learners = result.get(LEARNER_RESULTS, {})
    q_means = [
        read_number(learners, mid, "q_mean")
        for mid, values in learners.items()
        if isinstance(values, Mapping) and "q_mean" in values
    ]
    return {
        "replay_exploration": read_number(result, PROGRESS_KEY, "exploration"),
        "replay_buffer_episodes": read_number(result, PROGRESS_KEY, "buffer_episodes"),
        "replay_td_error": read_number(result, PROGRESS_KEY, "td_error_abs"),
        "replay_q": float(np.nanmean(q_means)) if q_means else float("nan"),
    }
