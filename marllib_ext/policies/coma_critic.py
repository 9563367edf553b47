"""Learner-only COMA critic: ``Q(s, a_{-i}, i)`` with one output per action of agent i."""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from marllib_ext.policies.joint_critic import mlp

# Critic batch column: one row per (env step, agent), see ``ops.coma.critic_inputs``.
COMA_INPUTS = "coma_inputs"
# forward_train output: (B, n_actions) Q values.
Q_VALUES = "q_values"


class CounterfactualCritic(TorchRLModule):
    """``q_values(inputs)``: ``(B, n_actions)``, ``Q(s, (a_{-i}, a'))`` for every ``a'``.

    ``model_config``: ``input_dim`` (state + the others' one-hot actions + agent one-hot),
    ``n_actions``, ``hiddens``, ``activation``.
    """

    @override(TorchRLModule)
    def setup(self) -> None:
        config = self.model_config
        self.q_net = mlp(
            config["input_dim"], list(config["hiddens"]), config["n_actions"], config["activation"]
        )

    @override(TorchRLModule)
    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {}  # learner-only: never asked for actions

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        # Through forward_train so that data-parallel learners all-reduce the gradients.
        return {Q_VALUES: self.q_values(batch[COMA_INPUTS])}

    def q_values(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.q_net(inputs)
