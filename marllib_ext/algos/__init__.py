"""Algorithm registry and the MARLlib-style API.

>>> from marllib_ext import algos, make_env
>>> algo = algos.mappo(hyperparam_source="mpe")
>>> result = algo.fit(make_env("mpe:simple_spread"), stop={"training_iteration": 3})

Every registered algorithm has a helper ``algos.<name>(hyperparam_source=None,
**overrides)``, made from the registry (its docstring is the YAML description).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from marllib_ext.algos.api import Algo, FitResult
from marllib_ext.algos.registry import (
    ALGORITHMS,
    AlgoSpec,
    Capabilities,
    algorithms_that,
    get_algo_spec,
)


def get(name: str, hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """The registered algorithm ``name``."""
    return Algo(name, hyperparam_source, **overrides)


def _helper(spec: AlgoSpec) -> Callable[..., Algo]:
    def helper(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
        return Algo(spec.name, hyperparam_source, **overrides)

    helper.__name__ = helper.__qualname__ = spec.name
    helper.__doc__ = f"{spec.description} ({spec.pipeline} pipeline)."
    return helper


for _spec in ALGORITHMS.values():
    globals()[_spec.name] = _helper(_spec)

__all__ = [
    "ALGORITHMS",
    "Algo",
    "AlgoSpec",
    "Capabilities",
    "FitResult",
    "algorithms_that",
    "get",
    "get_algo_spec",
    *ALGORITHMS,
]
