"""RLlib internals of recurrent PPO actors: the catalog hook that picks the encoder's
recurrent layer type, and a free-log-std head that takes sequences."""

from __future__ import annotations

import dataclasses

import torch
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.core.models.configs import RecurrentEncoderConfig
from ray.rllib.core.models.torch.heads import TorchFreeLogStdMLPHead

RECURRENT_LAYER_KEY = "recurrent_layer_type"  # model_config entry: "gru" | "lstm"


class SequenceFreeLogStdHead(TorchFreeLogStdMLPHead):
    """RLlib's free-log-std Gaussian head on inputs with a time rank (``[B, T, D]``):
    RLlib's repeats the log std over one batch axis only.

    Relies on: ``TorchFreeLogStdMLPHead`` keeps ``net``, ``log_std``, ``clip_log_std``
    and ``log_std_clip_param_const``."""

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
    free-log-std head takes sequences.

    Relies on: ``Catalog._get_encoder_config`` builds the encoder config from the model
    config (a ``RecurrentEncoderConfig`` with ``use_lstm``), and ``build_pi_head``
    leaves the head's config in ``pi_head_config``."""

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
