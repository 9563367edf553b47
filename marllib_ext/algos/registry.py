"""The one algorithm registry: name -> settings class + RLlib config builder."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from marllib_ext.algos import efx, ppo_family, roer, safe
from marllib_ext.algos.config import (
    CentralCriticSettings,
    PPOSettings,
    VDSettings,
    build_settings,
    known_sources,
    load_algo_yaml,
    merged_values,
)
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError

Builder = Callable[[Any, EnvHandle, str, "int | None"], AlgorithmConfig]


@dataclass(frozen=True)
class AlgoSpec:
    """One registered algorithm."""

    name: str
    family: str  # MARLlib pipeline: IL (independent), CC (centralized critic), VD
    settings_class: type
    build: Builder
    single_agent: bool  # whether it also runs on gymnasium (single-agent) envs

    @property
    def description(self) -> str:
        return load_algo_yaml(self.name).get("description", "")

    def settings(self, hyperparam_source: str, overrides: dict[str, Any] | None = None) -> Any:
        """Typed settings: YAML defaults for ``hyperparam_source`` updated by overrides."""
        if hyperparam_source != "common" and hyperparam_source not in known_sources(self.name):
            # Sources without a section simply use the common defaults; only flag typos.
            close = difflib.get_close_matches(hyperparam_source, known_sources(self.name), n=1)
            if close:
                raise ConfigError(
                    f"unknown hyperparam_source {hyperparam_source!r} for {self.name} "
                    f"(did you mean {close[0]!r}?)"
                )
        values = merged_values(self.name, hyperparam_source)
        values.update(overrides or {})
        return build_settings(
            self.settings_class, values, source=f"{self.name} ({hyperparam_source})"
        )


ALGORITHMS: dict[str, AlgoSpec] = {
    spec.name: spec
    for spec in (
        AlgoSpec("ippo", "IL", PPOSettings, ppo_family.build_ippo, single_agent=True),
        AlgoSpec("mappo", "CC", CentralCriticSettings, ppo_family.build_mappo, single_agent=False),
        AlgoSpec("efx_mappo", "CC", efx.EFXSettings, efx.build_efx_mappo, single_agent=False),
        AlgoSpec("vdppo", "VD", VDSettings, ppo_family.build_vdppo, single_agent=False),
        AlgoSpec("efx_vdppo", "VD", efx.EFXVDSettings, efx.build_efx_vdppo, single_agent=False),
        AlgoSpec("mappo_lag", "CC", safe.LagSettings, safe.build_mappo_lag, single_agent=False),
        AlgoSpec(
            "mappo_pid_lag", "CC", safe.PIDLagSettings, safe.build_mappo_pid_lag, single_agent=False
        ),
        AlgoSpec("mappo_cup", "CC", safe.CUPSettings, safe.build_mappo_cup, single_agent=False),
        AlgoSpec(
            "mappo_focops", "CC", safe.FOCOPSSettings, safe.build_mappo_focops, single_agent=False
        ),
        AlgoSpec("sac_roer", "SA", roer.ROERSettings, roer.build_sac_roer, single_agent=True),
        AlgoSpec("isac_roer", "IL", roer.ROERSettings, roer.build_isac_roer, single_agent=False),
    )
}


def get_algo_spec(name: str) -> AlgoSpec:
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    close = difflib.get_close_matches(name, list(ALGORITHMS), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown algorithm {name!r}.{hint} Available: {', '.join(ALGORITHMS)}")
