"""The PPO-family actors' encoder settings (``encoder``, ``conv_filters``) and their
checks; the modules are ``policies.grid_actor``."""

from __future__ import annotations

ENCODERS = ("mlp", "cnn")


def encoder_checks(encoder: str, conv_filters, use_rnn: bool) -> list[tuple[bool, str, str]]:
    """``(holds, field, requirement)`` of each rule the encoder settings follow."""
    layers_ok = bool(conv_filters) and all(
        len(layer) == 3 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                for v in layer)
        for layer in conv_filters
    )  # fmt: skip
    return [
        (encoder in ENCODERS, "encoder", f"one of {ENCODERS}"),
        (encoder != "cnn" or not use_rnn, "encoder", "cnn with use_rnn is not there yet"),
        (layers_ok, "conv_filters", "a list of [channels, kernel, stride] of positive ints"),
    ]
