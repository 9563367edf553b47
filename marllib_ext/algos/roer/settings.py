"""ROER's settings: SAC core plus the shared prioritization fields (seed 003)."""

from __future__ import annotations

from dataclasses import dataclass

from marllib_ext.algos.config import ACTIVATION_NAMES, Check, Settings, divisible_by_learners
from marllib_ext.policies.roer_sac import Q_NETWORKS
from marllib_ext.replay.prioritization import PrioritizedReplayFields


@dataclass(frozen=True)
class ROERSettings(Settings, PrioritizedReplayFields):
    """SAC core plus ROER's hyperparameters (seed 003 tables); the prioritization
    fields are ``PrioritizedReplayFields``."""

    gumbel_max_clip: float
    gamma: float
    actor_lr: float
    critic_lr: float
    alpha_lr: float
    tau: float
    initial_alpha: float
    n_step: int
    twin_q: bool
    train_batch_size: int
    buffer_capacity: int
    num_steps_sampled_before_learning_starts: int
    training_intensity: float | None
    fast_replay: bool
    updates_per_env_step: float
    rollout_fragment_length: int
    hiddens: list[int]
    activation: str
    q_network: str
    num_env_runners: int
    num_envs_per_env_runner: int
    num_learners: int
    num_gpus_per_learner: float

    def checks(self) -> list[Check]:
        return [
            (self.gumbel_max_clip > 0, "gumbel_max_clip", "must be > 0"),
            (0 <= self.gamma <= 1, "gamma", "must be in [0, 1]"),
            (self.train_batch_size > 0, "train_batch_size", "must be > 0"),
            *divisible_by_learners(self, "train_batch_size"),
            (
                self.num_learners <= 1 or self.per_type == "uniform",
                "num_learners",
                f"per_type={self.per_type!r} needs one learner: RLlib 2.60 joins the "
                "learners' TD errors shard by shard, not in the order the buffer sampled "
                "them, so priorities would go to the wrong transitions (per_type: uniform "
                "shards fine)",
            ),
            (self.buffer_capacity > 0, "buffer_capacity", "must be > 0"),
            (self.updates_per_env_step > 0, "updates_per_env_step", "must be > 0"),
            (
                not (self.fast_replay and self.training_intensity is not None),
                "training_intensity",
                "is RLlib's replay ratio; with fast_replay the ratio is "
                "updates_per_env_step (set training_intensity: null)",
            ),
            (
                not (self.fast_replay and self.n_step > 1),
                "n_step",
                "fast_replay stores 1-step transitions; n_step > 1 needs fast_replay: false",
            ),
            (self.n_step >= 1, "n_step", "must be >= 1"),
            (self.activation in ACTIVATION_NAMES, "activation", f"one of {ACTIVATION_NAMES}"),
            (self.q_network in Q_NETWORKS, "q_network", f"one of {Q_NETWORKS}"),
        ]
