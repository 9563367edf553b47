"""Finds private RLlib names used outside ``marllib_ext/rllib_compat/`` (by the AST,
not by a fixed list): used by ``tests/test_rllib_compat.py``."""

from __future__ import annotations

import ast
import importlib
import inspect
from functools import cache
from pathlib import Path

import ray

RLLIB = Path(ray.__file__).parent / "rllib"
ROOT = Path(__file__).resolve().parents[1]
# RLModule's documented extension points: a module overrides them and chains to super().
OVERRIDE_HOOKS = {"_forward", "_forward_train", "_forward_inference", "_forward_exploration"}


def _private(name: str | None) -> bool:
    return bool(name) and name.startswith("_") and not name.startswith("__")


@cache
def rllib_private_names() -> frozenset[str]:
    """Every ``_name`` RLlib defines: methods, attributes it assigns, parameters."""
    names = set()
    for path in RLLIB.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = node.name
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                name = node.attr
            elif isinstance(node, ast.arg):
                name = node.arg
            else:
                continue
            if _private(name):
                names.add(name)
    return frozenset(names)


def _defined_names(paths: list[Path]) -> set[str]:
    """Names our own code defines (functions, assigned attributes and names, params)."""
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def _rllib_bases_mention(cls: type, name: str) -> bool:
    """Whether an RLlib class in ``cls``'s MRO defines or assigns ``name``."""
    for base in cls.__mro__:
        if not base.__module__.startswith("ray.rllib"):
            continue
        try:
            source = inspect.getsource(base)
        except (OSError, TypeError):
            continue
        if f"def {name}(" in source or f"self.{name} =" in source or f"self.{name}:" in source:
            return True
    return False


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def private_accesses(paths: list[Path]) -> list[str]:
    """``path:line name`` for each private RLlib access in ``paths``:

    - ``obj._name`` on another object, with ``_name`` RLlib's and not defined by us;
    - ``self._name`` in a class whose RLlib bases define or assign ``_name``;
    - a private RLlib keyword argument (``_no_metrics_reduce=``);
    - ``super(Cls, self)`` (skipping a class of the MRO);
    - importing a private name of a ``ray`` module;
    - calling an RLModule hook other than by ``super()`` in its own override."""
    rllib = rllib_private_names()
    ours = _defined_names(paths) - OVERRIDE_HOOKS
    found = []
    for path in paths:
        tree = ast.parse(path.read_text())
        where = f"{path.relative_to(ROOT)}"
        classes = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for child in ast.walk(node):
                    classes.setdefault(id(child), node.name)
        for node in ast.walk(tree):
            line = getattr(node, "lineno", 0)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ray"):
                for alias in node.names:
                    if _private(alias.name):
                        found.append(f"{where}:{line} import {node.module}.{alias.name}")
            if isinstance(node, ast.Call):
                if isinstance(node.func, ast.Name) and node.func.id == "super" and node.args:
                    found.append(f"{where}:{line} super(...) with arguments")
                for keyword in node.keywords:
                    if _private(keyword.arg) and keyword.arg in rllib and keyword.arg not in ours:
                        found.append(f"{where}:{line} {keyword.arg}=")
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            if node.attr not in rllib:
                continue
            target = node.value
            is_super = isinstance(target, ast.Call) and getattr(target.func, "id", "") == "super"
            if node.attr in OVERRIDE_HOOKS:
                if not is_super:
                    found.append(f"{where}:{line} {node.attr}")
                continue
            if isinstance(target, ast.Name) and target.id in ("self", "cls") or is_super:
                class_name = classes.get(id(node))
                if class_name is None:
                    continue
                cls = getattr(importlib.import_module(_module_name(path)), class_name, None)
                if isinstance(cls, type) and _rllib_bases_mention(cls, node.attr):
                    found.append(f"{where}:{line} self.{node.attr}")
            elif node.attr not in ours:
                found.append(f"{where}:{line} .{node.attr}")
    return sorted(set(found))
