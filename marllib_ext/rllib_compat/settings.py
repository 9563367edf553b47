"""The package's typed settings on an RLlib config: one frozen object (and a few plain
values) that travel with the config to every learner, env runner and checkpoint."""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from marllib_ext.errors import ConfigError

SETTINGS_KEY = "marllib_ext_settings"


def with_settings(config: AlgorithmConfig, settings: Any) -> AlgorithmConfig:
    """``config`` carrying ``settings`` (a frozen dataclass).

    Relies on: ``AlgorithmConfig.learner_config_dict`` is copied, with the rest of the
    config, to every learner, env runner and callback, and is pickled into checkpoints
    (a frozen dataclass pickles as plain data: its class and field values)."""
    return with_learner_value(config, SETTINGS_KEY, settings)


def with_learner_value(config: AlgorithmConfig, key: str, value: Any) -> AlgorithmConfig:
    """``config`` carrying ``value`` under ``key`` next to the settings (plain data that
    every learner and the algorithm read with :func:`learner_value`).

    Relies on what :func:`with_settings` relies on: ``learner_config_dict`` travels
    with the config and is pickled into checkpoints."""
    return config.learners(learner_config_dict={key: value})


def learner_value(config: AlgorithmConfig, key: str) -> Any:
    """The value :func:`with_learner_value` attached to ``config`` under ``key``."""
    values = config.learner_config_dict or {}
    if key not in values:
        raise ConfigError(f"this RLlib config carries no {key!r} (not built by marllib_ext)")
    return values[key]


def settings_of(config: AlgorithmConfig) -> Any:
    """The typed settings :func:`with_settings` attached to ``config``."""
    settings = (config.learner_config_dict or {}).get(SETTINGS_KEY)
    if settings is None:
        raise ConfigError("this RLlib config was not built by marllib_ext (no settings)")
    return settings
