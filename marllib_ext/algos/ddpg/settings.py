"""DDPG-family hyperparameters (``_ddpg.yaml``: MARLlib's iddpg / maddpg / facmac)."""

from __future__ import annotations

from dataclasses import dataclass

from marllib_ext.algos.config import ACTIVATION_NAMES, Check
from marllib_ext.algos.team_replay.settings import TeamReplaySettings

FACMAC_MIXERS = ("qmix", "vdn")


@dataclass(frozen=True)
class DDPGSettings(TeamReplaySettings):
    """MARLlib's DDPG-family fields plus network sizes and TD3's options. The critic
    (local, central or mixed) is the algorithm's, not a key."""

    actor_lr: float
    critic_lr: float
    tau: float
    exploration_noise: float
    actor_hiddens: list[int]
    critic_hiddens: list[int]
    activation: str
    mixer_embed_dim: int
    hypernet_embed_dim: int
    state_normalize: bool
    grad_clip: float | None
    reward_standardize: bool
    twin_q: bool
    smooth_target_policy: bool
    target_noise: float
    target_noise_clip: float

    def checks(self) -> list[Check]:
        return [
            (self.actor_lr > 0, "actor_lr", "must be > 0"),
            (self.critic_lr > 0, "critic_lr", "must be > 0"),
            (0 < self.tau <= 1, "tau", "must be in (0, 1]"),
            (self.exploration_noise >= 0, "exploration_noise", "must be >= 0"),
            (self.target_noise >= 0, "target_noise", "must be >= 0"),
            (self.target_noise_clip >= 0, "target_noise_clip", "must be >= 0"),
            (self.activation in ACTIVATION_NAMES, "activation", f"one of {ACTIVATION_NAMES}"),
        ]

    def exploration_at(self, env_steps: int) -> float:
        return self.exploration_noise


@dataclass(frozen=True)
class FACMACSettings(DDPGSettings):
    """``facmac``: which network mixes the per-agent critics (``qmix``, FACMAC's
    default, or ``vdn``, the paper's FACMAC-vdn)."""

    mixer: str

    def checks(self) -> list[Check]:
        return [(self.mixer in FACMAC_MIXERS, "mixer", f"one of {FACMAC_MIXERS}")]
