"""The algorithm YAML files ``configs/algos/<name>.yaml`` and their inheritance.

An algorithm YAML file has the top-level keys ``description`` (one line),
``inherits`` (another YAML in the same folder, or a list of them merged left to right,
whose values come first), ``common`` (defaults), ``sources`` (per-env overrides keyed
by ``hyperparam_source``, e.g. ``mpe``) and ``search`` (values per key for
``marllib-ext tune`` grids). Values merge in this order: inherited common, inherited
source, own common, own source, then the user's overrides (``algos.config`` types and
checks the merged mapping)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marllib_ext.configs import ALGO_CONFIG_DIR, load_yaml
from marllib_ext.errors import ConfigError

_ALGO_FILE_KEYS = {"description", "inherits", "common", "sources", "search"}


def algo_yaml_path(name: str) -> Path:
    return ALGO_CONFIG_DIR / f"{name}.yaml"


def load_algo_yaml(name: str) -> dict[str, Any]:
    """One algorithm file, with its top-level keys checked."""
    path = algo_yaml_path(name)
    data = load_yaml(path)
    for key in data:
        if key not in _ALGO_FILE_KEYS:
            raise ConfigError(
                f"{path}: unknown top-level key {key!r}; allowed: {sorted(_ALGO_FILE_KEYS)}"
            )
    return data


def merged_values(name: str, hyperparam_source: str) -> dict[str, Any]:
    """Defaults of algorithm ``name`` for ``hyperparam_source``, inheritance resolved."""
    data = load_algo_yaml(name)
    values: dict[str, Any] = {}
    for parent in _parents(data):
        values.update(merged_values(parent, hyperparam_source))
    values.update(data.get("common") or {})
    values.update((data.get("sources") or {}).get(hyperparam_source) or {})
    return values


def search_space(name: str) -> dict[str, list[Any]]:
    """The ``search:`` section (key -> values for a grid sweep), inheritance resolved."""
    data = load_algo_yaml(name)
    space: dict[str, list[Any]] = {}
    for parent in _parents(data):
        space.update(search_space(parent))
    for key, values in (data.get("search") or {}).items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{algo_yaml_path(name)}: search.{key} must be a non-empty list")
        space[key] = values
    return space


def known_sources(name: str) -> set[str]:
    data = load_algo_yaml(name)
    sources = set((data.get("sources") or {}).keys())
    for parent in _parents(data):
        sources |= known_sources(parent)
    return sources


def _parents(data: dict[str, Any]) -> list[str]:
    """``inherits``: one file name or a list, merged left to right."""
    parents = data.get("inherits") or []
    return [parents] if isinstance(parents, str) else list(parents)
