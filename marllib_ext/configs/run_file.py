"""One run as data: the fields ``train --config FILE`` reads, the ``config.yaml`` every
run directory keeps, and what ``--resume`` trusts.

A run file::

    algo: qmix
    source: pymarl2          # hyperparameter section (default: the env's family)
    set: {td_lambda: 0.6}    # overrides of the algorithm's YAML
    env: smax:3m
    env_args: {}
    share_policy: all        # default: what the env and algorithm allow
    seed: 0
    stop: {env_steps: 200000}
    evaluation: {every: 5, episodes: 32}

A run directory's ``config.yaml`` holds the same fields, resolved (``source`` and
``share_policy`` filled in), plus ``settings``: every setting the run used, for the
record. Unknown keys and wrong types are refused by name (``ConfigError``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from marllib_ext.errors import ConfigError

RUN_CONFIG_FILE = "config.yaml"
# A file's stop names -> the progress row's columns (``api.STOP_KEYS``).
STOP_NAMES = {
    "env_steps": "timesteps_total",
    "iterations": "training_iteration",
    "episode_return": "episode_return_mean",
    "seconds": "time_total_s",
}
# A file's evaluation names -> settings keys.
EVALUATION_NAMES = {
    "every": "evaluation_interval",
    "episodes": "evaluation_duration",
    "explore": "evaluation_explore",
    "video_every": "evaluation_video_interval",
    "final_episodes": "evaluation_final_episodes",
    "budgets": "evaluation_budgets",
}
# Settings a resumed run may change: how it is evaluated, not what it learns.
RESUMABLE_CHANGES = frozenset(EVALUATION_NAMES.values())


def _expect(value: Any, kinds: type | tuple[type, ...], where: str, what: str) -> Any:
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise ConfigError(f"{where} must be {what}, got {value!r}")
    if not isinstance(value, kinds):
        raise ConfigError(f"{where} must be {what}, got {value!r} ({type(value).__name__})")
    return value


def read_mapping(value: Any, where: str, allowed: tuple[str, ...] | None = None) -> dict:
    """``value`` as a dict with string keys, every key in ``allowed`` (when given)."""
    if value is None:
        return {}
    _expect(value, dict, where, "a mapping")
    for key in value:
        _expect(key, str, f"{where} key", "a string")
        if allowed is not None and key not in allowed:
            raise ConfigError(f"unknown key {where}.{key}; allowed: {', '.join(allowed)}")
    return dict(value)


def read_stop(value: Any, where: str = "stop") -> dict[str, float]:
    """``{env_steps: 200000}`` -> ``{"timesteps_total": 200000}`` (the progress row's
    names, which ``Algo.fit`` takes)."""
    names = read_mapping(value, where, tuple(STOP_NAMES))
    if not names:
        raise ConfigError(f"{where} needs at least one of {', '.join(STOP_NAMES)}")
    for key, number in names.items():
        _expect(number, (int, float), f"{where}.{key}", "a number")
        if not math.isfinite(number) or (key != "episode_return" and number <= 0):
            raise ConfigError(f"{where}.{key} must be a finite number > 0, got {number!r}")
    return {STOP_NAMES[key]: number for key, number in names.items()}


def stop_names(stop: Mapping[str, float]) -> dict[str, float]:
    """The inverse of :func:`read_stop`."""
    inverse = {column: name for name, column in STOP_NAMES.items()}
    return {inverse[column]: value for column, value in stop.items()}


def read_evaluation(value: Any, where: str = "evaluation") -> dict[str, Any]:
    """``{every: 5, episodes: 32}`` -> the settings overrides (``evaluation_interval``, ...)."""
    names = read_mapping(value, where, tuple(EVALUATION_NAMES))
    out = {}
    for key, item in names.items():
        if key == "explore":
            _expect(item, bool, f"{where}.{key}", "true or false")
        elif key == "budgets":
            what = "a list of fractions of [z_low, z_high], each in [0, 1]"
            _expect(item, list, f"{where}.{key}", what)
            if not item:
                raise ConfigError(f"{where}.{key} must be {what}, got an empty list")
            for fraction in item:
                _expect(fraction, (int, float), f"{where}.{key}", what)
                if not 0 <= fraction <= 1:
                    raise ConfigError(f"{where}.{key} must be {what}, got {fraction!r}")
            item = [float(fraction) for fraction in item]
        elif item is not None:
            _expect(item, int, f"{where}.{key}", "an integer")
            least = 0 if key == "final_episodes" else 1  # 0: no re-evaluation
            if item < least:
                raise ConfigError(f"{where}.{key} must be >= {least}, got {item}")
        out[EVALUATION_NAMES[key]] = item
    return out


def evaluation_names(overrides: Mapping[str, Any]) -> dict[str, Any]:
    inverse = {key: name for name, key in EVALUATION_NAMES.items()}
    return {inverse[key]: value for key, value in overrides.items() if key in inverse}


@dataclass
class RunSpec:
    """One run: algorithm (with its source and overrides), env, sharing, seed, stop and
    evaluation. ``settings`` is the record of a finished run's resolved settings (empty
    in a file a user writes)."""

    algo: str
    env: str
    source: str | None = None
    set: dict[str, Any] = field(default_factory=dict)
    env_args: dict[str, Any] = field(default_factory=dict)
    share_policy: str | None = None
    seed: int | None = None
    stop: dict[str, float] = field(default_factory=dict)  # progress-row names
    evaluation: dict[str, Any] = field(default_factory=dict)  # settings keys
    settings: dict[str, Any] = field(default_factory=dict)

    FIELDS = (
        "algo", "env", "source", "set", "env_args", "share_policy", "seed", "stop",
        "evaluation", "settings",
    )  # fmt: skip

    @classmethod
    def from_mapping(cls, data: Any, where: str = "run file") -> RunSpec:
        data = read_mapping(data, where, cls.FIELDS)
        for key in ("algo", "env"):
            if key not in data:
                raise ConfigError(f"{where} needs `{key}`")
            _expect(data[key], str, f"{where}: {key}", "a string")
        for key in ("source", "share_policy"):
            if data.get(key) is not None:
                _expect(data[key], str, f"{where}: {key}", "a string")
        if data.get("seed") is not None:
            _expect(data["seed"], int, f"{where}: seed", "an integer")
        return cls(
            algo=data["algo"],
            env=data["env"],
            source=data.get("source"),
            set=read_mapping(data.get("set"), "set"),
            env_args=read_mapping(data.get("env_args"), "env_args"),
            share_policy=data.get("share_policy"),
            seed=data.get("seed"),
            stop=read_stop(data["stop"]) if data.get("stop") is not None else {},
            evaluation=read_evaluation(data.get("evaluation")),
            settings=read_mapping(data.get("settings"), "settings"),
        )

    @classmethod
    def load(cls, path: str | Path) -> RunSpec:
        return cls.from_mapping(load_yaml(path), where=str(path))

    def to_mapping(self) -> dict[str, Any]:
        """The YAML form (``stop`` and ``evaluation`` with the file's names)."""
        out = {
            "algo": self.algo,
            "source": self.source,
            "set": dict(self.set),
            "env": self.env,
            "env_args": dict(self.env_args),
            "share_policy": self.share_policy,
            "seed": self.seed,
            "stop": stop_names(self.stop),
            "evaluation": evaluation_names(self.evaluation),
        }
        if self.settings:
            out["settings"] = dict(self.settings)
        return out

    def dump(self) -> str:
        return yaml.safe_dump(_plain(self.to_mapping()), sort_keys=False)

    def overrides(self) -> dict[str, Any]:
        """What ``Algo`` takes on top of its YAML: ``set`` and the evaluation settings."""
        return {**self.set, **self.evaluation}


def _plain(value: Any) -> Any:
    """YAML-safe copy: tuples as lists, numpy scalars as Python numbers."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"file {str(path)!r} does not exist")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e


def write_run_config(run_dir: Path, run: RunSpec) -> Path:
    path = Path(run_dir) / RUN_CONFIG_FILE
    path.write_text(run.dump())
    return path


def settings_record(settings: Any) -> dict[str, Any]:
    """Every setting of a typed settings object, YAML-safe."""
    return _plain(dataclasses.asdict(settings))


def saved_run(checkpoint: str | Path) -> RunSpec:
    """The run a checkpoint belongs to: the ``config.yaml`` inside it or in the run
    directory that holds it."""
    path = Path(checkpoint)
    if not path.exists():
        raise ConfigError(f"resume checkpoint {str(path)!r} does not exist")
    for candidate in (path / RUN_CONFIG_FILE, path.parent / RUN_CONFIG_FILE):
        if candidate.is_file():
            return RunSpec.load(candidate)
    raise ConfigError(
        f"resume checkpoint {str(path)!r} has no {RUN_CONFIG_FILE} in it or next to it, so "
        "nothing says which algorithm and env it trained; continue it with the API "
        "(Algo.fit(..., resume_from=...)) and the same algorithm and env"
    )


def resumed_run(saved: RunSpec, asked: RunSpec | None, given: set[str]) -> RunSpec:
    """The run to continue: ``saved``, refusing any field in ``given`` (those the user
    stated) that ``asked`` sets differently; ``set`` keys may change evaluation only."""
    if asked is None:
        return dataclasses.replace(saved, settings={})
    for key in ("algo", "env", "source", "env_args", "share_policy", "seed"):
        if key in given and getattr(asked, key) != getattr(saved, key):
            raise ConfigError(
                f"{key} {getattr(asked, key)!r} conflicts with the checkpoint's run "
                f"({key} {getattr(saved, key)!r}); a resumed run keeps its own "
                "(leave it out, or start a new run)"
            )
    recorded = {**saved.settings, **saved.set}
    for key, value in asked.set.items():
        if key in RESUMABLE_CHANGES:
            continue
        if key not in recorded or recorded[key] != value:
            was = f" ({key}={recorded[key]!r})" if key in recorded else ""
            raise ConfigError(
                f"--set {key}={value!r} conflicts with the checkpoint's run{was}; a resumed "
                "run keeps its settings (evaluation settings may change)"
            )
    evaluation = {**saved.evaluation, **asked.evaluation}
    changed = {k: v for k, v in asked.set.items() if k in RESUMABLE_CHANGES}
    return dataclasses.replace(
        saved,
        set={**saved.set, **changed},
        evaluation=evaluation,
        stop=asked.stop or saved.stop,
        settings={},
    )
