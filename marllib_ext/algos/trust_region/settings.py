"""The trust-region keys (``configs/algos/_trust_region.yaml``), mixed into the PPO-family
settings of ``itrpo`` (independent) and ``matrpo`` / ``hatrpo`` (central critic)."""

from __future__ import annotations

from dataclasses import dataclass

from marllib_ext.algos.config import CentralCriticSettings, Check, PPOSettings


@dataclass(frozen=True)
class TrustRegionFields:
    """The actor step's keys. ``lr``, ``num_epochs`` and ``minibatch_size`` are the
    value function's (the actors take no optimizer step); ``clip_param`` is unused."""

    kl_threshold: float  # delta: the mean KL the step may reach
    cg_iterations: int
    cg_damping: float
    backtrack_coef: float
    line_search_steps: int
    accept_ratio: float

    def checks(self) -> list[Check]:
        return [
            (self.kl_threshold > 0, "kl_threshold", "must be > 0"),
            (self.cg_iterations >= 1, "cg_iterations", "must be >= 1"),
            (self.cg_damping >= 0, "cg_damping", "must be >= 0"),
            (0 < self.backtrack_coef < 1, "backtrack_coef", "must be in (0, 1)"),
            (self.line_search_steps >= 1, "line_search_steps", "must be >= 1"),
            (0 <= self.accept_ratio < 1, "accept_ratio", "must be in [0, 1)"),
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
