"""Deterministic actors (acting on env runners) and learner-only critics for IDDPG,
MADDPG and FACMAC.

``DeterministicActorRLModule``: ``mu(o)`` squashed into the Box action space; Gaussian
exploration noise of ``exploration_noise`` times half the action range, clipped to the
box. Target actors are learner-only copies (``target_module_id``).

``DDPGCritic``: ``Q(x)`` on the input the algorithm gives it (``(o_i, a_i)`` for
IDDPG/FACMAC, ``(s, a_1..a_n)`` for MADDPG), with its Polyak-averaged target inside.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from marllib_ext.ops.ddpg import gaussian_exploration, squash_to_bounds
from marllib_ext.policies.joint_critic import mlp
from marllib_ext.policies.q_agent import polyak_update

CRITIC_PREFIX = "critic_"


def critic_module_id(policy_id: str) -> str:
    """Module id of the critic serving actor policy ``policy_id``."""
    return f"{CRITIC_PREFIX}{policy_id}"


class DeterministicActorRLModule(TorchRLModule):
    """``mu(o)`` in the Box action space; ``model_config``: ``hiddens``,
    ``activation``, ``exploration_noise``."""

    @override(TorchRLModule)
    def setup(self) -> None:
        config = self.model_config
        obs_dim = int(np.prod(self.observation_space.shape))
        action_dim = int(np.prod(self.action_space.shape))
        self.net = mlp(obs_dim, list(config["hiddens"]), action_dim, config["activation"])
        self.register_buffer("low", torch.as_tensor(self.action_space.low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(self.action_space.high, dtype=torch.float32))

    def actions(self, obs: torch.Tensor) -> torch.Tensor:
        """``(..., d)`` observations -> ``(..., a)`` deterministic actions."""
        return squash_to_bounds(self.net(obs.float()), self.low, self.high)

    @override(TorchRLModule)
    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {Columns.ACTIONS: self.actions(batch[Columns.OBS])}

    @override(TorchRLModule)
    def _forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        actions = self.actions(batch[Columns.OBS])
        noisy = gaussian_exploration(
            actions,
            float(self.model_config["exploration_noise"]),
            self.low,
            self.high,
            torch.randn_like(actions),
        )
        return {Columns.ACTIONS: noisy}

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {}  # the DDPG-family learner calls actions() on the team batch


class DDPGCritic(TorchRLModule):
    """``Q(x)`` and its target; ``model_config``: ``input_dim``, ``hiddens``,
    ``activation`` and ``twin_q``: a second, independently initialized ``Q`` and target
    (TD3's clipped double Q; the learner takes the minimum of the two targets)."""

    @override(TorchRLModule)
    def setup(self) -> None:
        config = self.model_config
        self.twin_q = bool(config.get("twin_q", False))

        def network() -> torch.nn.Module:
            return mlp(int(config["input_dim"]), list(config["hiddens"]), 1, config["activation"])

        self.net, self.target_net = network(), network()
        self.twin_net = network() if self.twin_q else None
        self.target_twin_net = network() if self.twin_q else None
        for online, target in self._pairs():
            target.load_state_dict(online.state_dict())
            target.requires_grad_(False)

    def _pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        pairs = [(self.net, self.target_net)]
        if self.twin_q:
            pairs.append((self.twin_net, self.target_twin_net))
        return pairs

    @override(TorchRLModule)
    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {}

    def value(self, inputs: torch.Tensor, *, target: bool = False, twin: bool = False):
        """``(..., input_dim)`` -> ``(...)``; ``twin`` reads the second critic."""
        online, target_net = self._pairs()[1 if twin else 0]
        return (target_net if target else online)(inputs).squeeze(-1)

    def target_value(self, inputs: torch.Tensor) -> torch.Tensor:
        """The bootstrap value: the target critic's, the smaller of the two with
        ``twin_q``."""
        value = self.value(inputs, target=True)
        if self.twin_q:
            value = torch.minimum(value, self.value(inputs, target=True, twin=True))
        return value

    def sync_target(self, tau: float) -> None:
        for online, target in self._pairs():
            polyak_update(target, online, tau)
