"""Fields every team-replay algorithm shares: sampling, the episode store and its
prioritization (``replay.prioritization``), and where it runs."""

from __future__ import annotations

from dataclasses import dataclass

from marllib_ext.algos.config import Check, Settings
from marllib_ext.replay.prioritization import PrioritizedReplayFields


@dataclass(frozen=True)
class TeamReplaySettings(Settings, PrioritizedReplayFields):
    """Replay, sampling and placement fields of every team-replay algorithm."""

    batch_episode: int
    whole_episodes: bool | None
    gamma: float
    buffer_size: int
    training_intensity: float
    learning_starts: int | None
    random_warmup_steps: int
    num_env_runners: int
    overlap_sampling: bool
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
                self.whole_episodes is not False or not getattr(self, "use_rnn", False),
                "whole_episodes",
                "recurrent agents (use_rnn: true) train on whole episodes; set null or true",
            ),
            (
                self.learning_starts is None or self.learning_starts >= 1,
                "learning_starts",
                "null (batch_episode) or >= 1 episode",
            ),
            (self.random_warmup_steps >= 0, "random_warmup_steps", "must be >= 0"),
            (
                not self.overlap_sampling or self.num_env_runners >= 1,
                "overlap_sampling",
                "needs remote env runners (num_env_runners >= 1): the driver cannot "
                "sample and learn at once",
            ),
            (
                self.num_learners <= 1 or self.batch_episode >= self.num_learners,
                "num_learners",
                "each data-parallel learner trains on its share of a batch of "
                "batch_episode episodes' worth of rows: batch_episode must be >= "
                "num_learners",
            ),
        ]

    @property
    def episodes_before_learning(self) -> int:
        return self.batch_episode if self.learning_starts is None else self.learning_starts

    def acts_randomly_at(self, env_steps: int) -> bool:
        """Whether a sample call that starts after ``env_steps`` lifetime env steps acts
        with uniformly random actions (HARL's warm-up); the whole call does, so the
        warm-up ends at the first whole sample call at or past ``random_warmup_steps``."""
        return env_steps < self.random_warmup_steps

    @property
    def samples_whole_episodes(self) -> bool:
        """``whole_episodes`` where set; by default recurrent agents train on whole
        episodes and feed-forward ones on single team transitions."""
        if self.whole_episodes is not None:
            return self.whole_episodes
        return bool(getattr(self, "use_rnn", False))

    @property
    def transition_steps(self) -> int:
        """Steps per sampled transition (n-step windows where an algorithm has them)."""
        return 1

    def exploration_at(self, env_steps: int) -> float:
        """The exploration level at ``env_steps`` (epsilon, or the action-noise scale)."""
        raise NotImplementedError
