"""Soft actor-critic modules for teams (``masac``, ``hasac``).

``SoftActorRLModule``: a stochastic actor acting on the env runners, a squashed
Gaussian on a Box action space or a categorical on a Discrete one (over the legal
actions where the env hands action masks), with its temperature ``log_alpha``. It
samples when exploring and plays the mean action (continuous, as HARL evaluates) or the
most likely legal action (discrete) otherwise.

``SoftTeamCritic``: the team's twin soft Q-critic ``Q(s, a_1..a_n)`` with Polyak
targets (``DDPGCritic`` with ``twin_q``), learner-only; it keys the team's replayed
batch. With ``team_temperature`` it holds HASAC's critic temperature too.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn

from marllib_ext.envs.adapter import plain_observation_space
from marllib_ext.ops.masks import masked_argmax, masked_logits
from marllib_ext.ops.soft_ac import squashed_gaussian_sample
from marllib_ext.policies.ddpg import DDPGCritic
from marllib_ext.policies.joint_critic import mlp
from marllib_ext.policies.masked_actor import split_masked_batch


class SoftActorRLModule(TorchRLModule):
    """``model_config``: ``hiddens``, ``activation``, ``input_norm`` (a LayerNorm on
    the observation, HARL's feature normalization), ``final_activation`` (the last
    hidden layer's activation; None: ``activation``), ``initial_alpha``."""

    handles_action_masks = True

    @override(TorchRLModule)
    def setup(self) -> None:
        config = self.model_config
        obs_dim = int(np.prod(plain_observation_space(self.observation_space).shape))
        self.continuous = isinstance(self.action_space, gym.spaces.Box)
        if self.continuous:
            self.action_dim = int(np.prod(self.action_space.shape))
            outputs = 2 * self.action_dim  # mean and log std per dimension
            self.register_buffer("low", torch.as_tensor(self.action_space.low, dtype=torch.float32))
            self.register_buffer(
                "high", torch.as_tensor(self.action_space.high, dtype=torch.float32)
            )
        elif isinstance(self.action_space, gym.spaces.Discrete):
            self.action_dim = outputs = int(self.action_space.n)
        else:
            raise ValueError(f"soft actors need Box or Discrete actions, got {self.action_space}")
        self.net = mlp(
            obs_dim,
            list(config["hiddens"]),
            outputs,
            config["activation"],
            input_norm=bool(config.get("input_norm", False)),
            final_activation=config.get("final_activation"),
        )
        self.log_alpha = nn.Parameter(torch.tensor(math.log(float(config["initial_alpha"]))))

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    def sample(
        self, obs: torch.Tensor, *, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Continuous: ``(action (..., a), log pi(action) (...))``, reparameterized
        (``deterministic``: the mean action)."""
        mean, log_std = self.net(obs.float()).chunk(2, dim=-1)
        noise = torch.zeros_like(mean) if deterministic else torch.randn_like(mean)
        return squashed_gaussian_sample(mean, log_std, self.low, self.high, noise)

    def log_probs(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Discrete: ``log pi(.|o) (..., A)`` over the legal actions of ``mask``."""
        logits = self.net(obs.float())
        if mask is not None:
            logits = masked_logits(logits, mask.to(logits.dtype))
        return torch.log_softmax(logits, dim=-1)

    def _act(self, batch: dict[str, Any], deterministic: bool) -> dict[str, Any]:
        mask, batch = split_masked_batch(batch)
        obs = batch[Columns.OBS]
        if self.continuous:
            actions, _ = self.sample(obs, deterministic=deterministic)
            return {Columns.ACTIONS: actions}
        log_probs = self.log_probs(obs, mask)
        if deterministic:
            return {Columns.ACTIONS: masked_argmax(log_probs, mask)}
        return {Columns.ACTIONS: torch.distributions.Categorical(logits=log_probs).sample()}

    @override(TorchRLModule)
    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self._act(batch, deterministic=True)

    @override(TorchRLModule)
    def _forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self._act(batch, deterministic=False)

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {}  # the soft actor-critic learner samples on the team batch


class SoftTeamCritic(DDPGCritic):
    """``DDPGCritic`` with twin critics on ``(s, a_1..a_n)``; ``model_config`` adds
    ``team_temperature`` (HASAC: the critic's own ``log_alpha`` on the joint
    log-probability) and ``initial_alpha``."""

    @override(DDPGCritic)
    def setup(self) -> None:
        super().setup()
        if self.model_config.get("team_temperature", False):
            start = math.log(float(self.model_config["initial_alpha"]))
            self.log_alpha = nn.Parameter(torch.tensor(start))
        else:
            self.log_alpha = None

    def q_parameters(self) -> list[nn.Parameter]:
        """The online critics' weights (not the temperature, not the targets)."""
        nets = [self.net] + ([self.twin_net] if self.twin_q else [])
        return [p for net in nets for p in net.parameters()]

    def min_value(self, inputs: torch.Tensor) -> torch.Tensor:
        """``min(Q_1, Q_2)(inputs)`` of the online critics, ``(..., input_dim) -> (...)``."""
        return torch.minimum(self.value(inputs), self.value(inputs, twin=True))
