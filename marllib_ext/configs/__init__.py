"""YAML files holding every default: ``algos/<name>.yaml``, ``envs/<family>.yaml`` and
``env_presets/<family>.yaml``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parent
ALGO_CONFIG_DIR = CONFIG_DIR / "algos"
ENV_CONFIG_DIR = CONFIG_DIR / "envs"
# Per-task settings of the env families used by name (``vmas:<task>``), not registered
# one by one as ``envs/<family>.yaml`` entries are.
ENV_PRESET_DIR = CONFIG_DIR / "env_presets"


def load_yaml(path: Path) -> dict[str, Any]:
    """Loads one YAML mapping; an empty file is an empty mapping."""
    with open(path) as f:
        data = yaml.safe_load(f)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data
