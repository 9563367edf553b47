"""``masac`` / ``hasac`` hyperparameters (``masac.yaml``, ``hasac.yaml``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from marllib_ext.algos.config import ACTIVATION_NAMES, Check
from marllib_ext.algos.team_replay.settings import TeamReplaySettings


@dataclass(frozen=True)
class MASACSettings(TeamReplaySettings):
    """Soft actor-critic on team replay: squashed-Gaussian or categorical actors, one
    twin soft Q-critic per team on ``(s, a_1..a_n)``, a temperature per policy."""

    actor_lr: float
    critic_lr: float
    alpha_lr: float
    tau: float
    actor_hiddens: list[int]
    critic_hiddens: list[int]
    activation: str
    actor_final_activation: str | None
    input_norm: bool
    grad_clip: float | None
    initial_alpha: float
    auto_alpha: bool
    target_entropy: float | None
    discrete_target_entropy_scale: float
    n_step: int

    def checks(self) -> list[Check]:
        return [
            (self.actor_lr > 0, "actor_lr", "must be > 0"),
            (self.critic_lr > 0, "critic_lr", "must be > 0"),
            (self.alpha_lr > 0, "alpha_lr", "must be > 0"),
            (0 < self.tau <= 1, "tau", "must be in (0, 1]"),
            (self.initial_alpha > 0, "initial_alpha", "must be > 0"),
            (
                0 <= self.discrete_target_entropy_scale <= 1,
                "discrete_target_entropy_scale",
                "must be in [0, 1] (a share of log |A|)",
            ),
            (self.activation in ACTIVATION_NAMES, "activation", f"one of {ACTIVATION_NAMES}"),
            (
                self.actor_final_activation is None
                or self.actor_final_activation in ACTIVATION_NAMES,
                "actor_final_activation",
                f"null (activation) or one of {ACTIVATION_NAMES}",
            ),
            (self.n_step >= 1, "n_step", "must be >= 1"),
            (
                self.n_step == 1 or self.per_type == "uniform",
                "n_step",
                "n-step windows sample uniformly (per_type: uniform): priorities rank "
                "single transitions",
            ),
        ]

    @property
    def transition_steps(self) -> int:
        return self.n_step

    def target_entropy_of(self, continuous: bool, action_dim: int) -> float:
        """``target_entropy`` where set; else ``-|A|`` for a Box of ``action_dim``
        dimensions (SAC's), ``discrete_target_entropy_scale * log |A|`` for
        ``action_dim`` discrete actions (BenchMARL's)."""
        if self.target_entropy is not None:
            return float(self.target_entropy)
        if continuous:
            return -float(action_dim)
        return self.discrete_target_entropy_scale * math.log(action_dim)

    def exploration_at(self, env_steps: int) -> float:
        return float("nan")  # the learned temperatures are logged per policy instead
