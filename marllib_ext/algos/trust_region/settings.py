"""The trust-region keys (``configs/algos/_trust_region.yaml``), mixed into the PPO-family
settings of ``itrpo`` (independent) and ``matrpo`` / ``hatrpo`` (central critic)."""

from __future__ import annotations

from dataclasses import dataclass

from marllib_ext.algos.config import (
    CentralCriticSettings,
    Check,
    PPOSettings,
    divisible_by_learners,
)


@dataclass(frozen=True)
class TrustRegionFields:
    """The actor step's keys and the value functions' SGD (HARL's ``critic_lr`` and
    ``critic_epoch``); the actors take no optimizer step, so PPO's ``lr``,
    ``num_epochs``, ``minibatch_size``, ``clip_param``, ``entropy_coeff`` and KL keys
    are refused (:func:`marllib_ext.algos.ppo.schedule.ignored_keys`)."""

    kl_threshold: float  # delta: the mean KL the step may reach
    cg_iterations: int
    cg_damping: float
    backtrack_coef: float
    line_search_steps: int
    accept_ratio: float
    # Every k-th row (sequence) of the batch enters the Fisher-vector products: 1 (all
    # rows, HARL) or 5 (OpenAI Baselines' trpo_mpi, after Schulman's thesis pp. 40-42).
    fisher_subsample: int
    critic_lr: float
    critic_epochs: int
    critic_minibatch_size: int | None  # null: one step on the whole batch per epoch

    def checks(self) -> list[Check]:
        return [
            (self.critic_lr is not None and self.critic_lr > 0, "critic_lr", "must be > 0"),
            (self.critic_epochs > 0, "critic_epochs", "must be > 0"),
            (
                self.critic_minibatch_size is None
                or 0 < self.critic_minibatch_size <= self.train_batch_size,
                "critic_minibatch_size",
                f"must be in (0, train_batch_size={self.train_batch_size}] or null",
            ),
            *divisible_by_learners(self, "critic_minibatch_size"),
            (
                self.critic_minibatch_size is not None
                or self.num_learners <= 1
                or self.critic_epochs == 1,
                "critic_minibatch_size",
                "null (whole-batch steps) with num_learners > 1 needs critic_epochs: 1",
            ),
            (self.kl_threshold > 0, "kl_threshold", "must be > 0"),
            (self.cg_iterations >= 1, "cg_iterations", "must be >= 1"),
            (self.cg_damping >= 0, "cg_damping", "must be >= 0"),
            (0 < self.backtrack_coef < 1, "backtrack_coef", "must be in (0, 1)"),
            (self.line_search_steps >= 1, "line_search_steps", "must be >= 1"),
            (0 <= self.accept_ratio < 1, "accept_ratio", "must be in [0, 1)"),
            (self.fisher_subsample >= 1, "fisher_subsample", "must be >= 1 (1: every row)"),
        ]


@dataclass(frozen=True)
class ITRPOSettings(PPOSettings, TrustRegionFields):
    """``itrpo``: each policy's own value head trains by SGD, so it must not share the
    actor's encoder (the trust-region step would move the value with it)."""

    def checks(self) -> list[Check]:
        return [
            (
                not self.vf_share_layers,
                "vf_share_layers",
                "itrpo steps the actor and trains the value separately: must be false",
            )
        ]


@dataclass(frozen=True)
class MATRPOSettings(CentralCriticSettings, TrustRegionFields):
    """``matrpo`` and ``hatrpo``: trust-region actors on the joint critic."""
