"""Random network distillation's networks (Burda et al. 2019) as one RLModule that the
learner trains and the env runners hold: RLlib's weight sync brings each update's
predictor, the observation moments and the reference error to every runner, and
checkpoints keep them (``intrinsic_reward: rnd``, ``novelty_signals.RNDSignal``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from marllib_ext.ops.novelty import RND_INPUT_CLIP, merged_moments, rnd_error

# The module's id in the MultiRLModule, beside the actors and critics.
RND_MODULE_ID = "rnd"
# model_config keys: {input key: width} (one target/predictor pair per key: an
# agent's index, or "team_k" for team k's joint observation), layer widths, feature
# width and the seed of the fixed target's weights.
RND_INPUTS = "rnd_inputs"
RND_HIDDENS = "rnd_hiddens"
RND_FEATURES = "rnd_features"
RND_SEED = "rnd_seed"
# ... and what the learner needs to build the rows the runners score: the agents in
# the connectors' order with their plain observation widths, the teams as indices
# into them, and the scope.
RND_AGENTS = "rnd_agents"
RND_DIMS = "rnd_dims"
RND_TEAMS = "rnd_teams"
RND_SCOPE = "rnd_scope"
# forward_train: {ERRORS_PREFIX + key: (N,) each row's error} for a batch {key: (N, d)}.
ERRORS_PREFIX = "rnd_errors_"


def _mlp(width: int, hiddens: list[int], features: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for hidden in hiddens:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, features))
    return nn.Sequential(*layers)


class RNDPair(nn.Module):
    """One input's fixed random target ``f``, trained predictor ``f_hat`` and the running
    moments of the observations it has been trained on (the input normalization)."""

    def __init__(self, width: int, hiddens: list[int], features: int) -> None:
        super().__init__()
        self.target = _mlp(width, hiddens, features)
        self.predictor = _mlp(width, hiddens, features)
        for parameter in self.target.parameters():
            parameter.requires_grad_(False)
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(width, dtype=torch.float64))
        self.register_buffer("var", torch.ones(width, dtype=torch.float64))

    def normalized(self, rows: torch.Tensor) -> torch.Tensor:
        """``clip((x - mean) / std, -5, 5)``; the raw rows before any moments exist."""
        if float(self.count) == 0:
            return rows
        std = torch.sqrt(self.var).clamp_min(1e-8)
        scaled = (rows.double() - self.mean) / std
        return scaled.clamp(-RND_INPUT_CLIP, RND_INPUT_CLIP).to(rows.dtype)

    def errors(self, rows: torch.Tensor) -> torch.Tensor:
        """``(N,)`` :func:`ops.novelty.rnd_error` of ``rows`` ``(N, d)``."""
        x = self.normalized(rows)
        with torch.no_grad():
            target = self.target(x)
        return rnd_error(target, self.predictor(x))

    def add_moments(self, rows: np.ndarray) -> None:
        count, mean, var = merged_moments(
            float(self.count), self.mean.cpu().numpy(), self.var.cpu().numpy(), rows
        )
        self.count.fill_(count)
        self.mean.copy_(torch.from_numpy(mean))
        self.var.copy_(torch.from_numpy(var))


class RNDModule(TorchRLModule):
    """RND's target and predictor per input key, and ``reference``: the mean error of the
    predictor over the rows of its last update, after it (``ops.novelty.rnd_bonus``'s
    ``e_ref``)."""

    def setup(self) -> None:
        config = self.model_config
        hiddens, features = list(config[RND_HIDDENS]), int(config[RND_FEATURES])
        generator_state = torch.random.get_rng_state()
        # The same target on every learner and runner, whatever the global seed did.
        torch.manual_seed(int(config.get(RND_SEED) or 0))
        self.pairs = nn.ModuleDict(
            {
                str(key): RNDPair(int(width), hiddens, features)
                for key, width in sorted(config[RND_INPUTS].items())
            }
        )
        torch.random.set_rng_state(generator_state)
        self.register_buffer("reference", torch.zeros((), dtype=torch.float64))

    def batch_errors(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``{ERRORS_PREFIX + key: (N,) errors}`` of a batch ``{key: (N, d) rows}``."""
        return {ERRORS_PREFIX + key: self.pairs[key].errors(rows) for key, rows in batch.items()}

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self.batch_errors(batch)

    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self.batch_errors(batch)

    def errors(self, key: str, rows: np.ndarray) -> np.ndarray:
        """``(N,)`` float64 errors of ``rows`` ``(N, d)`` (the env runners' novelty)."""
        pair = self.pairs[key]
        tensor = torch.as_tensor(
            np.asarray(rows), dtype=torch.float32, device=self.reference.device
        )
        with torch.no_grad():
            return pair.errors(tensor).double().cpu().numpy()
