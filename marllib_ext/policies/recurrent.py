"""Recurrent PPO-family actors on RLlib's own recurrent encoders: an MLP tokenizer
(``fcnet_hiddens``), one GRU or LSTM layer, then RLlib's heads. RLlib's catalog builds
an LSTM from ``use_lstm``; ``rllib_compat.recurrent.RecurrentPPOCatalog`` builds the
layer type the model config names (RLlib's ``RecurrentEncoderConfig`` has both)."""

from __future__ import annotations

from typing import Any

from marllib_ext.rllib_compat.recurrent import RECURRENT_LAYER_KEY

RNN_TYPES = ("gru", "lstm")


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
