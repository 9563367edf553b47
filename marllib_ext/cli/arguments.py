"""Reading the command line's values: ``--set``/``--env-arg`` assignments, ``--grid``
lists, the stop criteria."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

import yaml

from marllib_ext.errors import ConfigError


def parse_assignments(pairs: list[str], flag: str) -> dict[str, Any]:
    """``["lr=0.001", "actor_hiddens=[64, 64]"]`` -> typed dict (YAML values)."""
    values = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects key=value, got {pair!r}")
        value = yaml.safe_load(raw) if raw else ""
        if isinstance(value, str):
            with contextlib.suppress(ValueError):  # YAML 1.1 reads "1e-3" as a string
                value = float(value)
        values[key.strip()] = value
    return values


def stop_from_args(args: argparse.Namespace) -> dict[str, float]:
    """The ``--stop-*`` criteria, 10 iterations where none is given."""
    return stop_given(args) or {"training_iteration": 10}


def stop_given(args: argparse.Namespace) -> dict[str, float]:
    """The ``--stop-*`` criteria given (empty where none is)."""
    stop: dict[str, float] = {}
    if args.stop_iters is not None:
        stop["training_iteration"] = args.stop_iters
    if args.stop_timesteps is not None:
        stop["timesteps_total"] = args.stop_timesteps
    if args.stop_reward is not None:
        stop["episode_return_mean"] = args.stop_reward
    return stop


def parse_grid(pairs: list[str]) -> dict[str, list[Any]]:
    """``["lr=1e-4,3e-4"]`` -> ``{"lr": [0.0001, 0.0003]}`` (each value read as YAML)."""
    grid = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip() or not raw:
            raise ConfigError(f"--grid expects key=v1,v2,..., got {pair!r}")
        items = [f"{key.strip()}={item}" for item in raw.split(",")]
        grid[key.strip()] = [parse_assignments([item], "--grid")[key.strip()] for item in items]
    return grid


def check_tracking(args: argparse.Namespace) -> None:
    """``--wandb`` / ``--mlflow``: the library is installed (and W&B has a key or runs
    offline), before anything starts."""
    from marllib_ext.algos.tracking import check_wandb_credentials, require_mlflow

    if args.wandb:
        check_wandb_credentials()
    if args.mlflow is not None:
        require_mlflow()
