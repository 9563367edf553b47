"""Ray Tune sweeps over any YAML key of a registered algorithm (``marllib-ext tune``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marllib_ext.algos.api import (
    Algo,
    check_cluster_resources,
    check_stop,
    mlflow_store,
    progress_row,
    should_stop,
)
from marllib_ext.algos.tracking import numeric_entries, tune_callbacks
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.envs.registry import EnvSpec, register_spec
from marllib_ext.errors import ConfigError


@dataclass(frozen=True)
class TrialSummary:
    """The last progress row of one finished trial with its swept values."""

    params: dict[str, Any]
    final: dict[str, float]
    error: str | None = None


def _trial(
    params: dict[str, Any],
    *,
    algo_name: str,
    hyperparam_source: str | None,
    env_spec: EnvSpec | None,
    env: EnvHandle,
    share_policy: str,
    seed: int | None,
    overrides: dict[str, Any],
    stop: dict[str, float],
) -> None:
    """Tune function trainable: builds the RLlib algorithm for ``params`` and trains."""
    from ray import tune

    if env_spec is not None:  # the trial process may not have run the user's registration
        register_spec(env_spec)
    algo = Algo(algo_name, hyperparam_source, **{**overrides, **params})
    algorithm = algo.rllib_config(env, share_policy=share_policy, seed=seed).build_algo()
    try:
        while True:
            result = algorithm.train()
            row = progress_row(result, algo.spec)
            # Every numeric result entry too, for the W&B / MLflow callbacks.
            tune.report({**numeric_entries(result), **row})
            if should_stop(row, stop):
                break
    finally:
        algorithm.stop()


def sweep(
    algo_name: str,
    env: EnvHandle,
    *,
    grid: Mapping[str, list[Any]],
    stop: Mapping[str, float],
    num_samples: int = 1,
    share_policy: str = "all",
    seed: int | None = None,
    hyperparam_source: str | None = None,
    local_dir: str | Path = "runs",
    wandb: str | None = None,
    mlflow: str | bool | None = None,
    **overrides: Any,
) -> list[TrialSummary]:
    """Runs one Tune trial per grid point (times ``num_samples``) and summarizes them.

    ``grid`` maps YAML keys to the values to try (``tune.grid_search``). Every grid
    point is validated before Tune starts, so a typo costs nothing. Each trial
    reserves RLlib's own resource request (driver + env runners), so trials only run
    side by side when the cluster has room. ``wandb`` / ``mlflow`` (as in ``fit``) add
    Ray's Tune logger callbacks: one W&B or MLflow run per trial.
    """
    from ray import tune

    if not grid:
        raise ConfigError("nothing to sweep: give --grid key=v1,v2 or a `search:` section in YAML")
    if num_samples < 1:
        raise ConfigError(f"num_samples must be >= 1, got {num_samples}")
    stop = check_stop(stop)
    algo = Algo(algo_name, hyperparam_source, **overrides)
    for key, values in grid.items():
        for value in values:
            algo.settings(env, **{key: value})  # validates key and type
    config = algo.rllib_config(env, share_policy=share_policy, seed=seed)
    check_cluster_resources(config)
    trainable = functools.partial(
        _trial,
        algo_name=algo_name,
        hyperparam_source=hyperparam_source,
        env_spec=env.spec if env.is_multi_agent else None,
        env=env,
        share_policy=share_policy,
        seed=seed,
        overrides=dict(overrides),
        stop=stop,
    )
    name = f"{algo_name}_{env.name.replace(':', '-')}_sweep"
    storage = Path(local_dir).resolve()
    callbacks = tune_callbacks(
        wandb_project=wandb,
        mlflow_uri=mlflow_store(mlflow),
        storage=storage / name,
        experiment=name,
    )
    tuner = tune.Tuner(
        tune.with_resources(trainable, config.algo_class.default_resource_request(config)),
        param_space={key: tune.grid_search(list(values)) for key, values in grid.items()},
        tune_config=tune.TuneConfig(num_samples=num_samples),
        run_config=tune.RunConfig(
            name=name, storage_path=str(storage), verbose=0, callbacks=callbacks
        ),
    )
    results = tuner.fit()
    summaries = []
    for result in results:
        params = {key: result.config[key] for key in grid}
        if result.error is not None:
            summaries.append(TrialSummary(params, {}, error=str(result.error).splitlines()[0]))
        else:
            summaries.append(TrialSummary(params, dict(result.metrics or {})))
    return summaries


def format_table(summaries: list[TrialSummary]) -> str:
    """One line per trial: swept values, iterations, env steps, returns."""
    if not summaries:
        return "no trials"
    keys = list(summaries[0].params)
    header = [*keys, "iter", "env_steps", "episode_return", "agent_return"]
    lines = ["  ".join(f"{h:>14}" for h in header)]
    for summary in summaries:
        final = summary.final
        cells = [f"{summary.params[k]!s:>14}" for k in keys]
        if summary.error:
            cells.append(f"  ERROR: {summary.error}")
        else:
            cells += [
                f"{int(final.get('training_iteration', 0)):>14d}",
                f"{int(final.get('timesteps_total', 0)):>14d}",
                f"{final.get('episode_return_mean', math.nan):>14.3f}",
                f"{final.get('agent_return_mean', math.nan):>14.3f}",
            ]
        lines.append("  ".join(cells))
    return "\n".join(lines)
