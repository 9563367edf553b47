"""RLlib's SAC RLModule plus the state-value network ``V(s)`` that ROER needs, and the
SAC paper's critic for continuous actions."""

from __future__ import annotations

import gymnasium as gym
import torch
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchDeterministic,
    TorchSquashedGaussian,
)
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.utils.annotations import override
from torch import nn

from marllib_ext.ops.ddpg import squash_to_bounds
from marllib_ext.policies.joint_critic import ACTIVATIONS, mlp

# ``q_network`` values: the SAC paper's critic on ``[s, a]``, or RLlib 2.60's own.
Q_NETWORKS = ("concat", "multi_stream")


class SquashedGaussianMeanAction(TorchSquashedGaussian):
    """RLlib's squashed Gaussian whose deterministic action is the squashed mean,
    ``low + (tanh(loc) + 1) / 2 * (high - low)``: RLlib 2.60's ``to_deterministic``
    returns the pre-tanh ``loc``, so ``explore=False`` acted with ``loc`` (clipped to
    the bounds by the action connector) instead of the policy's mean action."""

    def to_deterministic(self) -> TorchDeterministic:
        low, high = torch.as_tensor(self.low), torch.as_tensor(self.high)
        squashed = squash_to_bounds(self.loc, low, high)
        return TorchDeterministic(loc=torch.clamp(squashed, low, high))


class ConcatQEncoder(nn.Module):
    """The Q trunk of SAC's paper (and of CleanRL, Stable-Baselines3, ROER's code):
    ``[flatten(s), a] -> (Linear -> act) per hidden size``; RLlib's ``qf`` head puts
    the last ``Linear`` on it. Input: the batch dict with ``obs`` ``(B, ...)`` and
    ``actions`` ``(B, action_dim)``; output ``{ENCODER_OUT: (B, hiddens[-1])}``."""

    def __init__(self, obs_dim: int, action_dim: int, hiddens: list[int], activation: str):
        super().__init__()
        layers, width = [], obs_dim + action_dim
        for size in hiddens:
            layers += [nn.Linear(width, size), ACTIVATIONS[activation]()]
            width = size
        self.net = nn.Sequential(*layers)

    def forward(self, batch: dict) -> dict:
        observations = batch[Columns.OBS]
        inputs = torch.cat(
            [observations.reshape(observations.shape[0], -1).float(), batch[Columns.ACTIONS]],
            dim=-1,
        )
        return {ENCODER_OUT: self.net(inputs)}


class ROERSACTorchRLModule(DefaultSACTorchRLModule):
    """RLlib's SAC module plus ``V(s)`` (learner side only): ``model_config`` keys
    ``value_hiddens`` and ``value_activation``.

    ``model_config["q_network"]`` (required; ``_sac.yaml`` sets ``concat``): ``concat``
    gives continuous actions the SAC paper's critic, ``ConcatQEncoder`` then RLlib's
    linear head: 3 linear layers for 256x256. RLlib 2.60's own (``multi_stream``)
    encodes the observation and the action in separate 2-layer streams joined by two
    fusion layers with skip connections: 8 linear layers, about ten times the
    multiply-adds. Discrete actions keep RLlib's critic (``Q(s, .)`` on the
    observation), which is already the paper's.
    """

    @override(DefaultSACTorchRLModule)
    def setup(self) -> None:
        super().setup()
        if self.inference_only:
            return
        q_network = self.model_config["q_network"]
        if q_network not in Q_NETWORKS:
            raise ValueError(f"q_network must be one of {Q_NETWORKS}, got {q_network!r}")
        if q_network == "concat" and isinstance(self.action_space, gym.spaces.Box):
            self.qf_encoder = self._concat_q_encoder()
            if self.twin_q:
                self.qf_twin_encoder = self._concat_q_encoder()
        self.vf = mlp(
            int(gym.spaces.flatdim(self.observation_space)),
            list(self.model_config["value_hiddens"]),
            1,
            self.model_config["value_activation"],
        )

    def _concat_q_encoder(self) -> ConcatQEncoder:
        return ConcatQEncoder(
            int(gym.spaces.flatdim(self.observation_space)),
            int(gym.spaces.flatdim(self.action_space)),
            list(self.model_config["fcnet_hiddens"]),
            self.model_config["fcnet_activation"],
        )

    @override(DefaultSACTorchRLModule)
    def get_inference_action_dist_cls(self):
        if isinstance(self.action_space, gym.spaces.Box):
            return SquashedGaussianMeanAction
        return super().get_inference_action_dist_cls()

    @override(DefaultSACTorchRLModule)
    def get_non_inference_attributes(self) -> list[str]:
        return [*super().get_non_inference_attributes(), "vf"]

    def compute_state_values(self, observations: torch.Tensor) -> torch.Tensor:
        """``V(s)``, shape ``(B,)``."""
        return self.vf(observations.reshape(observations.shape[0], -1).float()).squeeze(-1)
