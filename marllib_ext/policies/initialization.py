"""The reference implementations' initialization of an RLlib PPO module or a joint
critic (HARL's ``use_orthogonal`` and its action-head gain, and an initial Gaussian
std), applied once after the module is built."""

from __future__ import annotations

import math

import torch
from torch import nn

from marllib_ext.ops.gaussian import raw_for_std

# Gains of hidden layers by activation (``nn.init.calculate_gain``).
HIDDEN_GAINS = {"tanh": 5.0 / 3.0, "relu": math.sqrt(2.0), "elu": 1.0, "silu": 1.0}
# RLlib's PPO module: the policy head's layers (the last is the action head).
POLICY_HEAD_PREFIX = "pi."
# The blocks initialized: RLlib's PPO module and the central critic (others, such as
# the budget actor's zero-initialized temperature net, keep their own start).
INITIALIZED_BLOCKS = ("encoder", "pi", "vf", "value_net", "cost_value_net")


def orthogonal_init(
    module: nn.Module,
    *,
    hidden_gain: float,
    action_head_gain: float,
    generator: torch.Generator,
) -> None:
    """Every ``Linear`` layer of ``module``: orthogonal weights, zero biases. The gain is
    ``hidden_gain`` for hidden layers, ``action_head_gain`` for the policy head's output
    layer and 1 for any other output layer (value heads). Output layers are the last
    ``Linear`` of each block of ``INITIALIZED_BLOCKS`` but the encoder."""
    layers = {
        name: layer
        for name, layer in module.named_modules()
        if isinstance(layer, nn.Linear) and name.split(".")[0] in INITIALIZED_BLOCKS
    }
    last_of_block = {name.split(".")[0]: name for name in layers}
    outputs = {last for block, last in last_of_block.items() if block != "encoder"}
    for name, layer in layers.items():
        if name not in outputs:
            gain = hidden_gain
        elif name.startswith(POLICY_HEAD_PREFIX):
            gain = action_head_gain
        else:
            gain = 1.0
        with torch.no_grad():
            nn.init.orthogonal_(layer.weight, gain=gain, generator=generator)
            nn.init.zeros_(layer.bias)


def set_initial_std(module: nn.Module, std: float, std_bound: float | None = None) -> None:
    """The state-independent log std parameter ``p`` of a ``free_log_std`` Gaussian
    policy set so that every action dimension starts at ``std``: ``p = log(std)``, or
    with a bound (``std = std_bound * sigmoid(p)``) ``p = logit(std / std_bound)``."""
    log_std = getattr(getattr(module, "pi", None), "log_std", None)
    if log_std is None:
        raise ValueError("initial_std needs a Gaussian policy with free_log_std")
    raw = math.log(std) if std_bound is None else raw_for_std(std, std_bound)
    with torch.no_grad():
        log_std.fill_(raw)
