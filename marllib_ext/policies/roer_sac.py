"""RLlib's SAC RLModule plus the state-value network ``V(s)`` that ROER needs."""

from __future__ import annotations

import gymnasium as gym
import torch
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from ray.rllib.utils.annotations import override

from marllib_ext.policies.joint_critic import mlp


class ROERSACTorchRLModule(DefaultSACTorchRLModule):
    """RLlib's SAC module plus ``V(s)`` (learner side only): ``model_config`` keys
    ``value_hiddens`` and ``value_activation``."""

    @override(DefaultSACTorchRLModule)
    def setup(self) -> None:
        super().setup()
        if not self.inference_only:
            self.vf = mlp(
                int(gym.spaces.flatdim(self.observation_space)),
                list(self.model_config["value_hiddens"]),
                1,
                self.model_config["value_activation"],
            )

    @override(DefaultSACTorchRLModule)
    def get_non_inference_attributes(self) -> list[str]:
        return [*super().get_non_inference_attributes(), "vf"]

    def compute_state_values(self, observations: torch.Tensor) -> torch.Tensor:
        """``V(s)``, shape ``(B,)``."""
        return self.vf(observations.reshape(observations.shape[0], -1).float()).squeeze(-1)
