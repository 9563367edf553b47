"""Learner-only joint critic: one row per (episode chunk, env step), input the global state."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn

from marllib_ext.ops.value_norm import denormalize, normalize, update_moments
from marllib_ext.policies.recurrent_critic import RecurrentValueNet

CRITIC_MODULE_ID = "joint_critic"
# model_config key of a central critic: the value-normalization beta (None: off).
VALUE_NORM_BETA = "value_norm_beta"
# Critic batch column: the critic's own outputs when the batch was built (the values
# a clipped value loss stays near; in the normalized space under value normalization).
OLD_VALUES = "old_values"
# model_config key of a joint critic: the actor modules whose team it serves.
ACTOR_MODULES = "actor_modules"


def critic_module_id(team: str | None = None) -> str:
    """The joint critic's module id: ``joint_critic`` for a one-team env,
    ``joint_critic_<team>`` for each team of a mixed env."""
    return CRITIC_MODULE_ID if team is None else f"{CRITIC_MODULE_ID}_{team}"


def team_critic_ids(teams) -> dict[str, str]:
    """Team name -> the module id of its joint critic (``critic_module_id`` of the team,
    or of ``None`` when there is only one team)."""
    teams = list(teams)
    return {team: critic_module_id(team if len(teams) > 1 else None) for team in teams}


def is_critic_module(module_id: str) -> bool:
    return module_id == CRITIC_MODULE_ID or module_id.startswith(CRITIC_MODULE_ID + "_")


# Batch column of the critic module holding the global state.
STATE = "state"
# forward_train output of a critic with a cost head: the team cost value V_c(s).
COST_VF_PREDS = "cost_vf_preds"

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def mlp(
    in_dim: int,
    hiddens: list[int],
    out_dim: int,
    activation: str,
    *,
    input_norm: bool = False,
    final_activation: str | None = None,
) -> nn.Sequential:
    """``Linear -> act`` per hidden size, then a linear output layer; ``input_norm``
    puts a LayerNorm on the inputs first (HARL's feature normalization);
    ``final_activation``: the last hidden layer's activation instead of ``activation``
    (HARL's ``final_activation_func``)."""
    hidden_activations = [activation] * len(hiddens)
    if hiddens and final_activation is not None:
        hidden_activations[-1] = final_activation
    for name in {activation, *hidden_activations}:
        if name not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    layers: list[nn.Module] = [nn.LayerNorm(in_dim)] if input_norm else []
    for size, name in zip(hiddens, hidden_activations, strict=True):
        layers += [nn.Linear(in_dim, size), ACTIVATIONS[name]()]
        in_dim = size
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int, int]:
    """``(before, after, out_size)``: "same" padding of one spatial axis, the extra
    cell after (TensorFlow's and RLlib's convention)."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2, out


class GridStackEncoder(nn.Module):
    """``(B, n*H*W*C)`` states -> ``(B, out_dim)`` features."""

    def __init__(
        self, grid_stack: Sequence[int], conv_filters: Sequence[Sequence[int]], activation: str
    ) -> None:
        super().__init__()
        n, height, width, channels = (int(d) for d in grid_stack)
        self.grid_stack = (n, height, width, channels)
        layers: list[nn.Module] = []
        depth = n * channels
        for out_depth, kernel, stride in conv_filters:
            top, bottom, height = same_padding(height, kernel, stride)
            left, right, width = same_padding(width, kernel, stride)
            layers += [
                nn.ZeroPad2d((left, right, top, bottom)),
                nn.Conv2d(depth, out_depth, kernel, stride),
                ACTIVATIONS[activation](),
            ]
            depth = out_depth
        self.cnn = nn.Sequential(*layers)
        self.out_dim = height * width * depth

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        n, height, width, channels = self.grid_stack
        lead = state.shape[:-1]
        grids = state.reshape(-1, n, height, width, channels)
        image = grids.permute(0, 1, 4, 2, 3).reshape(-1, n * channels, height, width)
        features = self.cnn(image).permute(0, 2, 3, 1)  # channels last, as RLlib's CNN
        return features.reshape(*lead, self.out_dim)


def grid_value_net(
    grid_stack: Sequence[int],
    conv_filters: Sequence[Sequence[int]],
    hiddens: list[int],
    activation: str,
) -> nn.Sequential:
    """A CNN on the state when the state is every agent's grid (``encoder: cnn``): the
    ``n`` flattened ``(H, W, C)`` grids stacked along the channels into one
    ``(H, W, n*C)`` image, conv layers ``[channels, kernel, stride]`` with "same" zero
    padding (as RLlib's CNN encoder pads), flattened channels last; then ``hiddens``
    and a linear value output."""
    encoder = GridStackEncoder(grid_stack, conv_filters, activation)
    return nn.Sequential(encoder, mlp(encoder.out_dim, hiddens, 1, activation))


def recurrent_value_net(
    in_dim: int, hiddens: list[int], activation: str, rnn_type: str, rnn_hidden: int, *,
    input_norm: bool = False,
) -> RecurrentValueNet:  # fmt: skip
    """``mlp``'s hidden layers, then a ``rnn_type`` layer of ``rnn_hidden`` units and a
    linear value head (``policies.recurrent_critic``)."""
    trunk = mlp(in_dim, hiddens, 1, activation, input_norm=input_norm)[:-1]
    return RecurrentValueNet(trunk, hiddens[-1] if hiddens else in_dim, rnn_type, rnn_hidden)


class CentralValueCritic(TorchRLModule, ValueFunctionAPI):
    """Central value ``V(s)`` on the global state.

    Built only on learners (``learner_only=True``): the env runners never need it.
    Its batch is assembled by ``JointAdvantageConnector`` and holds one row per
    (episode chunk, env step) -- coupling agents inside one module because RLlib
    shuffles and minibatches each module's rows independently.

    ``model_config``: ``state_dim`` (int), ``hiddens`` (list of int), ``activation``,
    ``cost_head`` (bool, default False): a second, separate network ``V_c(s)`` for
    the team cost (safe-MARL algorithms), ``feature_norm`` (bool, default False): a
    LayerNorm on the state first, and ``value_norm_beta`` (float or None):
    value normalization (:mod:`marllib_ext.ops.value_norm`). With it the value network
    learns standardized targets: ``forward_train``'s ``vf_preds`` are in that space,
    ``compute_values`` de-normalizes them (GAE and value targets see returns), and the
    running moments are a buffer (``value_moments``), so they live in checkpoints.
    ``grid_stack`` ``[n, H, W, C]`` and ``conv_filters``: a CNN on the state when it is
    every agent's grid (``grid_value_net``).
    ``rnn_type`` (``gru`` | ``lstm``; absent or None: feed-forward), ``rnn_hidden_dim``
    and ``max_seq_len``: a recurrent critic (rMAPPO's, ``recurrent_critic``); its batch
    is then ``[N, L]`` sequences with ``Columns.STATE_IN``, and ``block_values`` gives
    a rollout block's values step by step.
    """

    @override(TorchRLModule)
    def setup(self) -> None:
        config = self.model_config
        network = (config["state_dim"], list(config["hiddens"]), 1, config["activation"])
        input_norm = bool(config.get("feature_norm", False))
        self.rnn_type = config.get("rnn_type")
        if self.rnn_type is not None:
            if config.get("cost_head", False):
                raise ValueError("a recurrent central critic has no cost head yet")
            self.value_net = recurrent_value_net(
                *network[:2], network[3], self.rnn_type, int(config["rnn_hidden_dim"]),
                input_norm=input_norm,
            )  # fmt: skip
        elif config.get("grid_stack") is not None:
            self.value_net = grid_value_net(
                config["grid_stack"], config["conv_filters"], *network[1:2], network[3]
            )
        else:
            self.value_net = mlp(*network, input_norm=input_norm)
        self.cost_value_net = (
            mlp(*network, input_norm=input_norm) if config.get("cost_head", False) else None
        )
        self.value_norm_beta = config.get(VALUE_NORM_BETA)
        if self.value_norm_beta is not None:
            self.register_buffer("value_moments", torch.zeros(3, dtype=torch.float64))

    @override(TorchRLModule)
    def get_initial_state(self) -> dict[str, torch.Tensor]:
        return {} if self.rnn_type is None else self.value_net.initial_state()

    @override(TorchRLModule)
    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {}  # learner-only: never asked for actions

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        # The loss reads these outputs: with data-parallel learners only what runs
        # through forward_train (DDP's forward) has its gradients all-reduced.
        out = {Columns.VF_PREDS: self.raw_values(batch)}
        if self.cost_value_net is not None:
            out[COST_VF_PREDS] = self.compute_cost_values(batch)
        return out

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        """``V(s)``, shape ``(B,)``, on the returns' scale."""
        raw = self.raw_values(batch)
        if self.value_norm_beta is None:
            return raw
        return denormalize(raw, self.moments()).to(raw.dtype)

    def raw_values(self, batch: dict[str, Any]) -> torch.Tensor:
        """The value network's outputs, ``(B,)`` (standardized under value norm); a
        recurrent critic's ``(N, L)`` over its sequences."""
        if self.rnn_type is not None:
            return self.value_net.sequences(batch[STATE], batch[Columns.STATE_IN])
        return self.value_net(batch[STATE]).squeeze(-1)

    def block_values(self, inputs: dict[str, torch.Tensor], after: dict[str, torch.Tensor], resets):
        """A recurrent critic's ``(T, B)`` values of a block's states and of the states
        after each step (``STATE`` of ``inputs`` / ``after``), on the returns' scale, and
        the state entered at each step (``RecurrentValueNet.block_values``)."""
        values, next_values, entered = self.value_net.block_values(
            inputs[STATE], after[STATE], resets
        )
        if self.value_norm_beta is not None:
            moments = self.moments()
            values = denormalize(values, moments).to(values.dtype)
            next_values = denormalize(next_values, moments).to(values.dtype)
        return values, next_values, entered

    def moments(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The running ``(m, s, d)`` of the value targets."""
        return tuple(self.value_moments)

    def normalized(self, returns: torch.Tensor) -> torch.Tensor:
        """``returns`` in the value network's space (themselves without value norm)."""
        if self.value_norm_beta is None:
            return returns
        return normalize(returns, self.moments()).to(returns.dtype)

    @torch.no_grad()
    def update_value_norm(self, batch_mean: torch.Tensor, batch_mean_sq: torch.Tensor) -> None:
        """One step of the running moments from a batch of value targets."""
        moments = update_moments(self.moments(), batch_mean, batch_mean_sq, self.value_norm_beta)
        self.value_moments.copy_(torch.stack([torch.as_tensor(m) for m in moments]))

    def compute_cost_values(self, batch: dict[str, Any]) -> torch.Tensor:
        """Team cost value ``V_c(s)``, shape ``(B,)``."""
        if self.cost_value_net is None:
            raise RuntimeError("this critic was built without a cost head (cost_head=False)")
        return self.cost_value_net(batch[STATE]).squeeze(-1)
