"""Off-policy MARL on replayed team episodes: shared by joint Q-learning (``iql``,
``vdn``, ``qmix``) and the deterministic actor-critics (``iddpg``, ``maddpg``,
``facmac``).

Data flow:

1. Env runners (``rollout.team_episodes.TeamEpisodeEnvRunner``) act with the
   algorithm's agent modules and return whole, time-aligned ``TeamEpisode`` s: from
   the batched rollout's arrays where they can, from RLlib's episodes elsewhere. With
   ``overlap_sampling`` the remote runners sample the next episodes while this
   iteration's updates run (``rollout.overlapped``).
2. ``TeamReplayAlgorithm.training_step`` stores them in a ``TeamEpisodeStore``
   (``replay/team_episodes.py`` says why not RLlib's buffer).
3. It samples team transitions (feed-forward agents) or whole episodes (GRU agents) and
   hands them to the learner as one batch under each team's module (``team_modules``).
4. The learner (``TeamReplayLearner``) turns its per-step TD errors into priorities by
   the ``per_type`` rule (``replay.prioritization``) and hands them back through
   ``rllib_compat.hand_priorities_to_replay``; they go to the store.
"""

from __future__ import annotations

import numpy as np
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

from marllib_ext.algos.team_replay.progress import PROGRESS_KEY
from marllib_ext.algos.team_replay.settings import TeamReplaySettings
from marllib_ext.policies.q_agent import JointQMixer
from marllib_ext.replay.team_episodes import SampledTeamBatch, TeamEpisodeStore
from marllib_ext.rllib_compat import (
    learner_value,
    priorities_from_learner,
    sample_episodes,
    settings_of,
    should_save_component,
)
from marllib_ext.rllib_compat.checkpoints import ReplayInCheckpoints
from marllib_ext.rollout.overlapped import OverlappedSampler
from marllib_ext.rollout.team_episodes import TEAM_LAYOUT_KEY

LAYOUT_KEY = TEAM_LAYOUT_KEY  # learner_config_dict key of the agent/team layout
EPISODES_SAMPLED = "num_episodes_sampled_lifetime"  # timesteps key for target updates
REPLAY_COMPONENT = "team_replay"  # the store's checkpoint directory (and state key)


# ---- algorithm ----------------------------------------------------------------------------
class TeamReplayAlgorithm(ReplayInCheckpoints, Algorithm):
    """Samples complete episodes, stores team episodes, trains on replayed batches.
    Checkpoints hold the store in their ``team_replay`` directory (``rllib_compat.checkpoints``
    says when they leave it out)."""

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> AlgorithmConfig:
        # Tune's resource request starts from it.
        return TeamReplayConfig(algo_class=cls)

    @override(Algorithm)
    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        settings: TeamReplaySettings = settings_of(self.config)
        self.replay_settings = settings
        layout = learner_value(self.config, LAYOUT_KEY)
        self.team_modules = list(layout["teams"])
        self.agent_policies = sorted(set(layout["policy_of"].values()))
        rule = settings.priority_rule
        self.store = TeamEpisodeStore(
            settings.buffer_size,
            prioritized=rule.prioritized,
            alpha=rule.sampling_alpha(settings),
            importance_beta=rule.importance_beta(settings),
            per_beta=rule.ema_step(settings),
            seed=self.config.seed,
        )
        self.overlapped = (
            OverlappedSampler(
                self.env_runner_group, self.config.sample_timeout_s, settings.acts_randomly_at
            )
            if settings.overlap_sampling
            else None
        )
        self.episodes_sampled = 0
        self.update_credit = 0.0
        self.last_td_error = float("nan")

    @override(Algorithm)
    def training_step(self) -> None:
        settings = self.replay_settings
        steps_before = self.metrics.peek(
            (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
        )
        if self.overlapped is None:
            random_actions = settings.acts_randomly_at(steps_before)
            episodes, runner_results = sample_episodes(
                self.env_runner_group, self.config.sample_timeout_s, random_actions
            )
        else:  # the runners sample the next episodes while this iteration updates
            episodes, runner_results, random_actions = self.overlapped.collect(steps_before)
        self.metrics.aggregate(runner_results, key=ENV_RUNNER_RESULTS)
        for episode in episodes:  # TeamEpisodes, assembled by the runners
            self.store.add(episode)
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
            batch = MultiAgentBatch(
                {mid: policy_batch for mid in self.team_modules},
                env_steps=int(sampled.mask.sum()),
            )
            # Several learners each take the whole batch and train on their share of it.
            learners = self.config.num_learners
            learner_results = self.learner_group.update(
                **({"batches": [batch] * learners} if learners > 1 else {"batch": batch}),
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps,
                    EPISODES_SAMPLED: self.episodes_sampled,
                },
            )
            # This update's (B, L) priorities, the learners' shares in order, and the
            # mean |TD error|.
            team = self.team_modules[0]
            priorities = np.concatenate(
                [priorities_from_learner(result, team) for result in learner_results]
            )
            self.store.update_priorities(sampled, priorities)
            self.last_td_error = float(
                np.nanmean(
                    [
                        result[mid]["td_error_abs"].peek()
                        for result in learner_results
                        for mid in self.team_modules
                    ]
                )
            )
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
                "random_action_episodes": len(episodes) if random_actions else 0,
                "buffer_episodes": len(self.store),
                "episodes_sampled": self.episodes_sampled,
                "updates": updates,
                "td_error_abs": self.last_td_error,
                "sampling_total_variation": self.store.sampling_spread(
                    settings.samples_whole_episodes
                )["total_variation"],
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
        return self.store.sample_transitions(
            max(1, round(settings.batch_episode * mean_length)), settings.transition_steps
        )

    @override(Algorithm)
    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        components = super().get_checkpointable_components()
        if self.replay_in_checkpoints:
            components.append((REPLAY_COMPONENT, TeamReplayCheckpoint(self)))
        return components

    @override(Algorithm)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self.replay_in_checkpoints and should_save_component(
            self, REPLAY_COMPONENT, components, not_components
        ):
            state[REPLAY_COMPONENT] = TeamReplayCheckpoint(self).get_state()
        return state

    @override(Algorithm)
    def set_state(self, state: dict) -> None:
        # Checkpoints before the store had its own directory hold it in the base state.
        replay = state.get(REPLAY_COMPONENT)
        if replay is not None and self.replay_in_checkpoints:
            TeamReplayCheckpoint(self).set_state(replay)
        super().set_state(state)


class TeamReplayCheckpoint(Checkpointable):
    """The algorithm's store and replay counters as a checkpoint component of their own
    (``<checkpoint>/team_replay/``), so that a restore for playing never reads them."""

    def __init__(self, algorithm: TeamReplayAlgorithm) -> None:
        self.algorithm = algorithm

    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        return {
            "store": self.algorithm.store.get_state(),
            "episodes_sampled": self.algorithm.episodes_sampled,
            "update_credit": self.algorithm.update_credit,
        }

    def set_state(self, state: dict) -> None:
        self.algorithm.store.set_state(state["store"])
        self.algorithm.episodes_sampled = int(state["episodes_sampled"])
        self.algorithm.update_credit = float(state["update_credit"])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple, dict]:
        return (), {}


class TeamReplayConfig(AlgorithmConfig):
    """RLlib config whose algorithm is ``TeamReplayAlgorithm``; the builder names the
    learner (``.learners(learner_class=...)``) and every module spec."""

    def __init__(self, algo_class=None) -> None:
        super().__init__(algo_class=algo_class or TeamReplayAlgorithm)

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        # Every module comes from the builder's MultiRLModuleSpec; RLlib fills spaces
        # into this one only.
        return RLModuleSpec(module_class=JointQMixer)
