"""Import paths of checkpoints written before the package was laid out by family.

A checkpoint pickles the classes and functions of its config by module path
(``marllib_ext.algos.joint_q.JointQLearner``). Those modules moved into family
subpackages; this module resolves the old paths to the new objects, so that
``Algorithm.from_checkpoint`` and ``evaluate`` still load such checkpoints:

- old modules that no longer exist (``algos/learners.py``, ``algos/efx_settings.py``,
  ...) are served by a meta-path finder as alias modules;
- old modules whose name is now a package (``algos/joint_q.py`` -> ``algos/joint_q/``)
  resolve missing names through ``legacy_getattr`` in the package's ``__init__``.

The joint-Q and DDPG learners were one class each, told apart by the ``mixer`` and
``critic_mode`` settings; ``algos/team_replay/legacy.py`` picks each algorithm's own
learner from those settings.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import types
from collections.abc import Callable
from typing import Any

# old module -> where its names live now (searched in order)
MOVED_MODULES: dict[str, tuple[str, ...]] = {
    "marllib_ext.algos.learners": ("marllib_ext.algos.ppo.learners",),
    "marllib_ext.algos.ppo_family": ("marllib_ext.algos.ppo.builders",),
    "marllib_ext.algos.a2c": ("marllib_ext.algos.ppo.a2c",),
    "marllib_ext.algos.efx_settings": ("marllib_ext.algos.efx.settings",),
    "marllib_ext.algos.efx_budget": ("marllib_ext.algos.efx.budget",),
    "marllib_ext.algos.efx_outer_loop": ("marllib_ext.algos.efx.outer_loop",),
    "marllib_ext.algos.ddpg_family": (
        "marllib_ext.algos.ddpg.settings",
        "marllib_ext.algos.ddpg.learners",
        "marllib_ext.algos.ddpg.builders",
    ),
    # now packages: names their __init__ does not export
    "marllib_ext.algos.efx": (
        "marllib_ext.algos.efx.builders",
        "marllib_ext.algos.efx.learners",
        "marllib_ext.algos.efx.outer_loop",
    ),
    "marllib_ext.algos.happo": (
        "marllib_ext.algos.happo.learner",
        "marllib_ext.algos.happo.builders",
        "marllib_ext.algos.efx.learners",
    ),
    "marllib_ext.algos.coma": ("marllib_ext.algos.coma.learner", "marllib_ext.algos.coma.builders"),
    "marllib_ext.algos.joint_q": (
        "marllib_ext.algos.joint_q.settings",
        "marllib_ext.algos.joint_q.learners",
        "marllib_ext.algos.joint_q.builders",
    ),
    "marllib_ext.algos.team_replay": (
        "marllib_ext.algos.team_replay.algorithm",
        "marllib_ext.algos.team_replay.settings",
        "marllib_ext.algos.team_replay.specs",
    ),
}

# (old module, old name) -> "new.module:name"
RENAMED: dict[tuple[str, str], str] = {
    ("marllib_ext.algos.efx", "_budget_connector_factory"): (
        "marllib_ext.algos.efx.builders:budget_connector_factory"
    ),
    (
        "marllib_ext.algos.joint_q",
        "JointQLearner",
    ): "marllib_ext.algos.team_replay.legacy:JointQLearner",
    (
        "marllib_ext.algos.joint_q",
        "JointQConfig",
    ): "marllib_ext.algos.team_replay.legacy:JointQConfig",
    ("marllib_ext.algos.ddpg_family", "DDPGFamilyLearner"): (
        "marllib_ext.algos.team_replay.legacy:DDPGFamilyLearner"
    ),
    ("marllib_ext.algos.ddpg_family", "DDPGFamilyConfig"): (
        "marllib_ext.algos.team_replay.legacy:DDPGFamilyConfig"
    ),
}


def _resolve(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def legacy_attribute(module: str, name: str) -> Any:
    """``module.name`` as a checkpoint of the flat layout names it."""
    if (module, name) in RENAMED:
        return _resolve(RENAMED[(module, name)])
    for new_module in MOVED_MODULES.get(module, ()):
        found = importlib.import_module(new_module)
        if hasattr(found, name):
            return getattr(found, name)
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


def legacy_getattr(module: str) -> Callable[[str], Any]:
    """A package's module-level ``__getattr__`` that serves its old module's names."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return legacy_attribute(module, name)

    return __getattr__


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every old module that is no longer a file as an alias module."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED_MODULES:
            parent, _, leaf = fullname.rpartition(".")
            parent_module = sys.modules.get(parent)
            if parent_module is not None and _is_real_submodule(parent_module, leaf):
                return None
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name, f"old path of {MOVED_MODULES[spec.name]}")
        module.__getattr__ = legacy_getattr(spec.name)  # type: ignore[attr-defined]
        return module

    def exec_module(self, module) -> None:
        pass


def _is_real_submodule(parent: types.ModuleType, leaf: str) -> bool:
    return any(
        os.path.exists(os.path.join(directory, leaf + suffix))
        for directory in getattr(parent, "__path__", ())
        for suffix in ("", ".py")
    )


def install() -> None:
    """Adds the alias finder once (``import marllib_ext`` does)."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
