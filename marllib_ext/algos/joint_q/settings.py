"""Joint Q-learning hyperparameters (``_joint_q.yaml``: MARLlib's iql / vdn / qmix)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from marllib_ext.algos.config import ACTIVATION_NAMES, Check
from marllib_ext.algos.encoders import encoder_checks
from marllib_ext.algos.team_replay.settings import TeamReplaySettings
from marllib_ext.ops.joint_q import linear_schedule

OPTIMIZERS = ("rmsprop", "adam")
REWARD_MOMENTS = ("batch", "running")


@dataclass(frozen=True)
class JointQSettings(TeamReplaySettings):
    """MARLlib's joint-Q hyperparameters. The mixer is the algorithm's (``iql``: none,
    ``vdn``: the sum, ``qmix``: the hypernetwork mixer), not a key."""

    lr: float
    optimizer: str
    optimizer_eps: float | None
    rmsprop_alpha: float
    target_network_update_freq: int
    tau: float | None
    initial_epsilon: float
    final_epsilon: float
    epsilon_timesteps: int
    reward_standardize: bool
    reward_moments: str
    common_reward: bool
    use_rnn: bool
    rnn_hidden_dim: int
    segmented_unroll: bool
    hiddens: list[int]
    activation: str
    encoder: str
    conv_filters: list[list[int]]
    # The agent networks build their own CNN (q_agent), not the on-policy actors' one.
    builds_own_encoder: ClassVar[bool] = True
    mixer_embed_dim: int
    hypernet_embed_dim: int
    state_normalize: bool
    mixer_init_scale: float | None
    grad_clip: float | None
    td_lambda: float | None
    obs_agent_id: bool
    obs_last_action: bool
    bootstrap_truncated: bool

    def checks(self) -> list[Check]:
        return [
            (self.lr > 0, "lr", "must be > 0"),
            (self.optimizer in OPTIMIZERS, "optimizer", f"one of {OPTIMIZERS}"),
            (
                self.optimizer_eps is None or self.optimizer_eps > 0,
                "optimizer_eps",
                "null (the optimizer's default) or > 0",
            ),
            (0 < self.rmsprop_alpha < 1, "rmsprop_alpha", "must be in (0, 1)"),
            (self.target_network_update_freq > 0, "target_network_update_freq", "must be > 0"),
            (self.tau is None or 0 < self.tau <= 1, "tau", "null (hard updates) or in (0, 1]"),
            (
                0 <= self.final_epsilon <= self.initial_epsilon <= 1,
                "final_epsilon",
                "need 0 <= final_epsilon <= initial_epsilon <= 1",
            ),
            (self.epsilon_timesteps >= 0, "epsilon_timesteps", "must be >= 0"),
            (self.reward_moments in REWARD_MOMENTS, "reward_moments", f"one of {REWARD_MOMENTS}"),
            (
                self.mixer_init_scale is None or self.mixer_init_scale > 0,
                "mixer_init_scale",
                "null (torch's default init) or > 0",
            ),
            (self.rnn_hidden_dim > 0, "rnn_hidden_dim", "must be > 0"),
            (self.activation in ACTIVATION_NAMES, "activation", f"one of {ACTIVATION_NAMES}"),
            *encoder_checks(self.encoder, self.conv_filters),
            (
                self.encoder == "mlp" or not (self.obs_agent_id or self.obs_last_action),
                "encoder",
                "cnn reads the grid alone: set obs_agent_id and obs_last_action false",
            ),
            (
                self.td_lambda is None or 0.0 <= self.td_lambda <= 1.0,
                "td_lambda",
                "null (one-step targets) or in [0, 1]",
            ),
            (
                self.td_lambda is None or self.samples_whole_episodes,
                "td_lambda",
                "lambda-returns run over whole episodes: set whole_episodes: true or use_rnn",
            ),
            (
                self.bootstrap_truncated or self.samples_whole_episodes,
                "bootstrap_truncated",
                "false marks each stored episode's last step terminal, so it needs whole "
                "episodes: set whole_episodes: true or use_rnn",
            ),
        ]

    @property
    def running_reward_moments(self) -> bool:
        """Rewards standardized by the running moments of every reward trained on."""
        return self.reward_standardize and self.reward_moments == "running"

    def exploration_at(self, env_steps: int) -> float:
        return linear_schedule(
            env_steps, self.initial_epsilon, self.final_epsilon, self.epsilon_timesteps
        )
