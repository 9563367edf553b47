"""EFX actor whose budget inputs set an inverse temperature (``budget_temperature``).

RLlib's default PPO actor sees the budget as one more input column; raising its entropy
on high-budget rows then tends to raise it on every row, because the easiest way for
the network to raise entropy is to shrink all its logits. This actor gives the budget a
direct path: the action-distribution inputs of the default actor are scaled by
``beta = exp(u * g(b))``, ``b`` the last ``budget_temperature_inputs`` observation
columns (the time left, when ``time_feature`` is on, and the normalized budget ``u``, the
last column). ``g`` starts at 0, so the module starts as the default actor, and the
factor ``u`` keeps it the default actor wherever no budget is left (z = 0 included).
"""

from __future__ import annotations

import gymnasium as gym
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns

from marllib_ext.ops.budget_temperature import gated_log_beta, scale_distribution_inputs

TEMPERATURE_INPUTS_KEY = "budget_temperature_inputs"
TEMPERATURE_HIDDEN_KEY = "budget_temperature_hidden"
# forward_train output: the plain actor's detached distribution inputs scaled by the
# temperature, the path of the push when push_gradient is temperature
TEMPERATURE_DIST_INPUTS = "efx_temperature_dist_inputs"


class BudgetTemperatureActor(DefaultPPOTorchRLModule):
    """The default PPO actor with ``beta = exp(u * g(b))`` on its distribution inputs."""

    def setup(self) -> None:
        super().setup()
        inputs = int(self.model_config[TEMPERATURE_INPUTS_KEY])
        hidden = int(self.model_config[TEMPERATURE_HIDDEN_KEY])
        self.temperature = torch.nn.Sequential(
            torch.nn.Linear(inputs, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
        )
        torch.nn.init.zeros_(self.temperature[-1].weight)
        torch.nn.init.zeros_(self.temperature[-1].bias)
        self._inputs = inputs
        self._discrete = isinstance(self.action_space, gym.spaces.Discrete)

    def _scaled(self, batch, output, *, train: bool = False):
        budget = batch[Columns.OBS][..., -self._inputs :].float()
        log_beta = gated_log_beta(self.temperature(budget), budget[..., -1:])
        plain = output[Columns.ACTION_DIST_INPUTS]
        output[Columns.ACTION_DIST_INPUTS] = scale_distribution_inputs(
            plain, log_beta, discrete=self._discrete
        )
        if train:
            output[TEMPERATURE_DIST_INPUTS] = scale_distribution_inputs(
                plain.detach(), log_beta, discrete=self._discrete
            )
        return output

    def _forward(self, batch, **kwargs):
        return self._scaled(batch, super()._forward(batch, **kwargs))

    def _forward_train(self, batch, **kwargs):
        return self._scaled(batch, super()._forward_train(batch, **kwargs), train=True)
