"""Algorithm registry and the MARLlib-style API.

>>> from marllib_ext import algos, make_env
>>> algo = algos.mappo(hyperparam_source="mpe")
>>> result = algo.fit(make_env("mpe:simple_spread"), stop={"training_iteration": 3})
"""

from __future__ import annotations

from typing import Any

from marllib_ext.algos.api import Algo, FitResult
from marllib_ext.algos.registry import ALGORITHMS, AlgoSpec, get_algo_spec


def get(name: str, hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """The registered algorithm ``name``."""
    return Algo(name, hyperparam_source, **overrides)


def ippo(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """Independent PPO (MARLlib IL pipeline)."""
    return Algo("ippo", hyperparam_source, **overrides)


def mappo(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """MAPPO with a centralized critic (MARLlib CC pipeline)."""
    return Algo("mappo", hyperparam_source, **overrides)


def efx_mappo(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """MAPPO with EFXplorer conservative exploration."""
    return Algo("efx_mappo", hyperparam_source, **overrides)


def vdppo(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """VDPPO: team GAE on V_tot mixed by VDN or QMIX (MARLlib VD pipeline)."""
    return Algo("vdppo", hyperparam_source, **overrides)


def efx_vdppo(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """VDPPO with EFXplorer conservative exploration."""
    return Algo("efx_vdppo", hyperparam_source, **overrides)


def mappo_lag(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """MAPPO-Lagrangian: cost critic, Adam-updated multiplier (safe MARL)."""
    return Algo("mappo_lag", hyperparam_source, **overrides)


def mappo_pid_lag(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """MAPPO-Lagrangian with a PID-controlled multiplier (safe MARL)."""
    return Algo("mappo_pid_lag", hyperparam_source, **overrides)


def mappo_cup(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """MAPPO-CUP: PPO step on the reward, then a projection on the cost (safe MARL)."""
    return Algo("mappo_cup", hyperparam_source, **overrides)


def mappo_focops(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """MAPPO-FOCOPS: first-order constrained policy update (safe MARL)."""
    return Algo("mappo_focops", hyperparam_source, **overrides)


def sac_roer(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """SAC with ROER prioritized replay (single-agent gymnasium envs)."""
    return Algo("sac_roer", hyperparam_source, **overrides)


def isac_roer(hyperparam_source: str | None = None, **overrides: Any) -> Algo:
    """Independent multi-agent SAC with ROER prioritized replay."""
    return Algo("isac_roer", hyperparam_source, **overrides)


__all__ = [
    "isac_roer",
    "sac_roer",
    "mappo_cup",
    "mappo_focops",
    "mappo_lag",
    "mappo_pid_lag",
    "efx_vdppo",
    "vdppo",
    "ALGORITHMS",
    "Algo",
    "AlgoSpec",
    "FitResult",
    "efx_mappo",
    "get",
    "get_algo_spec",
    "ippo",
    "mappo",
]
