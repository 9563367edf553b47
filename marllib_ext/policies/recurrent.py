"""Recurrent PPO-family actors on RLlib's own recurrent encoders: an MLP tokenizer
(``fcnet_hiddens``), one GRU or LSTM layer, then RLlib's heads. RLlib's catalog builds
an LSTM from ``use_lstm``; ``RecurrentPPOCatalog`` builds the layer type the model
config names (RLlib's ``RecurrentEncoderConfig`` has both)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.core.models.configs import RecurrentEncoderConfig
from ray.rllib.core.models.torch.heads import TorchFreeLogStdMLPHead

RECURRENT_LAYER_KEY = "recurrent_layer_type"  # model_config entry: "gru" | "lstm"
RNN_TYPES = ("gru", "lstm")


class SequenceFreeLogStdHead(TorchFreeLogStdMLPHead):
    """RLlib's free-log-std Gaussian head on inputs with a time rank (``[B, T, D]``):
    RLlib's repeats the log std over one batch axis only."""

    def _forward(self, inputs: torch.Tensor, **kwargs) -> torch.Tensor:
        mean = self.net(inputs)
        log_std = self.log_std
        if self.clip_log_std:
            limit = self.log_std_clip_param_const
            log_std = torch.clamp(log_std, -limit, limit)
        return torch.cat([mean, log_std.expand(*mean.shape[:-1], -1)], dim=-1)


class RecurrentPPOCatalog(PPOCatalog):
    """RLlib's PPO catalog whose recurrent encoder is a GRU or an LSTM, as
    ``model_config["recurrent_layer_type"]`` says (RLlib's: always an LSTM), and whose
    free-log-std head takes sequences."""

    def build_pi_head(self, framework: str):
        head = super().build_pi_head(framework)
        if isinstance(head, TorchFreeLogStdMLPHead):
            return SequenceFreeLogStdHead(self.pi_head_config)
        return head

    @classmethod
    def _get_encoder_config(cls, observation_space, model_config_dict, action_space=None):
        config = super()._get_encoder_config(observation_space, model_config_dict, action_space)
        layer = model_config_dict.get(RECURRENT_LAYER_KEY, "lstm")
        if isinstance(config, RecurrentEncoderConfig) and config.recurrent_layer_type != layer:
            config = dataclasses.replace(config, recurrent_layer_type=layer)
        return config


def recurrent_model_config(rnn_type: str, hidden: int, max_seq_len: int) -> dict[str, Any]:
    """The model-config entries of a recurrent actor: ``hidden`` units of ``rnn_type``
    after the MLP, trained on sequences of at most ``max_seq_len`` steps."""
    if rnn_type not in RNN_TYPES:
        raise ValueError(f"rnn_type must be one of {RNN_TYPES}, got {rnn_type!r}")
    return {
        "use_lstm": True,  # RLlib's switch for its recurrent encoder; the type is ours
        RECURRENT_LAYER_KEY: rnn_type,
        "lstm_cell_size": hidden,
        "max_seq_len": max_seq_len,
    }


def max_seq_len(module) -> int | None:
    """The sequence length a recurrent module trains on (``None``: not recurrent)."""
    if not getattr(module, "is_stateful", lambda: False)():  # any value head; RLModules may be
        return None
    config = module.model_config
    value = config.get("max_seq_len") if isinstance(config, dict) else config.max_seq_len
    return int(value)
