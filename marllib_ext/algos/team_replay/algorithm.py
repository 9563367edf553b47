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
4. The learner (``TeamReplayLearner``) turns its per-step TD errors into priorities by
   the ``per_type`` rule (``replay.prioritization``) and hands them back through
   ``rllib_compat.hand_priorities_to_replay``; they go to the store.
"""

from __future__ import annotations

import numpy as np
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

from marllib_ext.algos.team_replay.progress import PROGRESS_KEY
from marllib_ext.algos.team_replay.settings import TeamReplaySettings
from marllib_ext.envs.adapter import (
    ACTION_MASK_KEY,
    OBSERVATION_KEY,
    STATE_KEY,
    STEP_REWARDS_KEY,
)
from marllib_ext.replay.team_episodes import SampledTeamBatch, TeamEpisode, TeamEpisodeStore
from marllib_ext.rllib_compat import (
    learner_value,
    priorities_from_learner,
    sample_episodes,
    settings_of,
)

LAYOUT_KEY = "team_replay_layout"  # learner_config_dict key of the agent/team layout
EPISODES_SAMPLED = "num_episodes_sampled_lifetime"  # timesteps key for target updates


# ---- episodes -> team episodes ------------------------------------------------------------
def team_episode(episode, agents: tuple[str, ...], obs_dim: int) -> TeamEpisode:
    """A finished ``MultiAgentEpisode`` as a time-aligned ``TeamEpisode``: row ``t`` of
    every array is env step ``t`` for every agent (agents in ``agents`` order,
    observations zero-padded to ``obs_dim``, the state from ``info["state"]``).

    Agents absent at some steps (dead, not yet arrived) leave zeros there: no
    observation, action or reward, ``present`` 0. An agent's own termination is marked
    in ``agent_terminated`` at the last step it acted."""
    if episode.env_t_started != 0:
        raise ValueError(
            f"episode {episode.id_!r} starts at env step {episode.env_t_started}; team "
            "replay stores whole episodes (batch_mode='complete_episodes')"
        )
    length = int(episode.env_t)
    n_agents = len(agents)
    obs = np.zeros((length + 1, n_agents, obs_dim), np.float32)
    rewards = np.zeros((length, n_agents), np.float32)
    present = np.zeros((length + 1, n_agents), bool)
    agent_terminated = np.zeros((length, n_agents), np.float32)
    actions, masks = None, None
    infos: list = [None] * (length + 1)
    for index, aid in enumerate(agents):
        agent_episode = episode.agent_episodes.get(aid)
        if agent_episode is None:
            continue  # never appeared
        agent_steps = episode.env_t_to_agent_t[aid].get(slice(0, length + 1))
        rows = np.array([e for e, k in enumerate(agent_steps) if k != episode.SKIP_ENV_TS_TAG])
        agent_obs = agent_episode.get_observations()
        if isinstance(agent_obs, dict):  # masked observations
            mask = np.asarray(agent_obs[ACTION_MASK_KEY], np.float32)
            if masks is None:
                masks = np.zeros((length + 1, n_agents, mask.shape[-1]), np.float32)
            masks[rows, index] = mask
            agent_obs = agent_obs[OBSERVATION_KEY]
        agent_obs = np.asarray(agent_obs, np.float32).reshape(len(rows), -1)
        obs[rows, index, : agent_obs.shape[1]] = agent_obs
        acted = rows[: len(agent_episode)]  # rows where it observed and then acted
        agent_actions = np.asarray(agent_episode.get_actions())
        if actions is None:
            actions = np.zeros((length, n_agents, *agent_actions.shape[1:]), agent_actions.dtype)
        actions[acted, index] = agent_actions
        rewards[acted, index] = np.asarray(agent_episode.get_rewards(), np.float32)
        present[acted, index] = True
        if agent_episode.is_terminated:
            agent_terminated[acted[-1], index] = 1.0
        elif rows[-1] == length:
            present[length, index] = True  # alive at the end: its bootstrap observation
    for aid in sorted(episode.agent_episodes):  # any agent's info carries the state
        agent_steps = episode.env_t_to_agent_t[aid].get(slice(0, length + 1))
        agent_infos = episode.agent_episodes[aid].get_infos()
        for row, step in enumerate(agent_steps):
            if step != episode.SKIP_ENV_TS_TAG and infos[row] is None:
                infos[row] = agent_infos[step]
    state = np.stack([np.asarray(info[STATE_KEY], np.float32).reshape(-1) for info in infos])
    if all(STEP_REWARDS_KEY in info for info in infos[1:]):
        # Each agent's reward of each env step, also where it was not observing (RLlib
        # credits those to its next row, a turn later on turn-taking envs).
        rewards = np.array(
            [[info[STEP_REWARDS_KEY].get(aid, 0.0) for aid in agents] for info in infos[1:]],
            np.float32,
        ).reshape(length, n_agents)
    return TeamEpisode(
        obs=obs,
        state=state,
        actions=actions,
        rewards=rewards,
        terminated=bool(episode.is_terminated),
        action_mask=masks,
        present=present.astype(np.float32),
        agent_terminated=agent_terminated,
    )


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
        rule = settings.priority_rule
        self.store = TeamEpisodeStore(
            settings.buffer_size,
            prioritized=rule.prioritized,
            alpha=rule.sampling_alpha(settings),
            importance_beta=rule.importance_beta(settings),
            per_beta=rule.ema_step(settings),
            seed=self.config.seed,
        )
        self.episodes_sampled = 0
        self.update_credit = 0.0
        self.last_td_error = float("nan")

    @override(Algorithm)
    def training_step(self) -> None:
        settings = self.replay_settings
        episodes, runner_results = sample_episodes(
            self.env_runner_group, self.config.sample_timeout_s
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
            # One learner: this update's (B, L) priorities and its mean |TD error|.
            priorities = priorities_from_learner(learner_results[0], self.team_modules[0])
            self.store.update_priorities(sampled, priorities)
            self.last_td_error = float(
                np.nanmean(
                    [learner_results[0][mid]["td_error_abs"].peek() for mid in self.team_modules]
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
