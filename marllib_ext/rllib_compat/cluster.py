"""The Ray a run uses, and whether it has the GPUs a config asks for."""

from __future__ import annotations

import os

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from marllib_ext.errors import ConfigError


def ray_address(address: str | None = None) -> str:
    """The Ray to use: ``address``, else ``$RAY_ADDRESS`` (set by ``ray job submit``),
    else ``"local"``: always a new local Ray, never the address an earlier ``ray start``
    left in Ray's temp dir (a dead cluster there makes ``ray.init()`` hang)."""
    return address or os.environ.get("RAY_ADDRESS") or "local"


def check_cluster_resources(config: AlgorithmConfig) -> None:
    """GPU learners need GPUs in the Ray cluster; say so before anything starts."""
    import ray

    gpus_per_learner = config.num_gpus_per_learner
    if not gpus_per_learner:
        return
    needed = gpus_per_learner * max(1, config.num_learners)
    available = ray.cluster_resources().get("GPU", 0)
    if available < needed:
        raise ConfigError(
            f"num_gpus_per_learner={gpus_per_learner} with num_learners={config.num_learners} "
            f"needs {needed:g} GPU(s) but the Ray cluster has {available:g}; "
            "set num_gpus_per_learner=0 to learn on CPU"
        )
