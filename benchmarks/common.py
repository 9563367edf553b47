"""What the benchmark scripts share: their argument parser, one way to start Ray, the
JSON result file, reading stored per-iteration CSVs, and interleaved iteration timing.

Learning tables are experiment files (``benchmarks/experiments/``, run by ``marllib-ext
benchmark``); the scripts here measure speed, memory and mechanisms."""

from __future__ import annotations

import argparse
import csv
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser described by the first paragraph of the script's docstring."""
    return argparse.ArgumentParser(description=(doc or "").split("\n\n")[0].strip())


def start_ray(num_cpus: int | None = 2, num_gpus: int | None = None, **kwargs: Any) -> None:
    """A local Ray for one benchmark: its own CPUs (and GPUs), no dashboard, the workers'
    logs kept out of the printed tables."""
    import ray

    ray.init(
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
        **kwargs,
    )


def write_json(path: str | Path, results: dict[str, Any], **arguments: Any) -> Path:
    """One result file: ``{"script", "arguments", "machine", "results"}``."""
    import inspect

    caller = Path(inspect.stack()[1].filename).name
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "script": caller,
        "arguments": arguments,
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "results": results,
    }
    path.write_text(json.dumps(record, indent=1, default=float))
    return path


def cached_json(path: str | Path, compute: Callable[[], Any]) -> Any:
    """The JSON at ``path``, else ``compute()`` written there: a measurement made once
    per run directory."""
    path = Path(path)
    if path.exists():
        return json.loads(path.read_text())
    value = compute()
    path.write_text(json.dumps(value))
    return value


def print_report(results: dict[str, Any], out: str | Path | None = None, **arguments: Any) -> None:
    """The machine-readable line a script ends with; with ``out``, also the JSON file
    of :func:`write_json`."""
    print(json.dumps(results, default=float))
    if out is not None:
        write_json(out, results, **arguments)


# ---- stored per-iteration CSVs --------------------------------------------------------
def read_run(path: Path) -> list[dict[str, float]]:
    """The rows of a run's CSV, every value as a float."""
    with open(path) as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def finished_run(path: Path, steps: int) -> list[dict[str, float]] | None:
    """The rows of a run that reached ``steps`` env steps, else None."""
    if not path.exists():
        return None
    rows = read_run(path)
    return rows if rows and rows[-1]["timesteps_total"] >= steps else None


def window_mean(rows: list[dict[str, float]], key: str, window: int) -> float:
    """Mean of ``key`` over the last ``window`` rows (NaN rows skipped)."""
    return float(np.nanmean([r[key] for r in rows[-window:]]))


def mean_at(rows: list[dict[str, float]], steps: int, key: str, window: int) -> float:
    """Mean of ``key`` over the ``window`` rows ending at the first one that reached
    ``steps`` env steps."""
    reached = next(i for i, r in enumerate(rows) if r["timesteps_total"] >= steps)
    return window_mean(rows[: reached + 1], key, window)


EARLIER_RUNS = "earlier_runs.csv"


def earlier_runs(
    out: Path, seeds_column: str = "per_agent_return", path: Path | None = None
) -> tuple[dict[str, set[int]], dict[tuple, list[float]]]:
    """Values of runs whose CSVs are not kept, from ``<out>/earlier_runs.csv`` (columns
    algo, seeds, column, env_steps, value, source; ``seeds`` such as ``0|1`` names the
    seeds a group of values came from, order unknown): the seeds each algorithm has there,
    and the values by (algo, column, env_steps). An algorithm's seeds are read from the
    rows of ``seeds_column``; ``path`` reads another file than ``<out>/earlier_runs.csv``."""
    path = out / EARLIER_RUNS if path is None else path
    seeds: dict[str, set[int]] = {}
    values: dict[tuple, list[float]] = {}
    if path.exists():
        with open(path) as f:
            for row in csv.DictReader(f):
                if row["column"] == seeds_column:
                    seeds.setdefault(row["algo"], set()).update(
                        int(s) for s in row["seeds"].split("|")
                    )
                key = (row["algo"], row["column"], int(row["env_steps"]))
                values.setdefault(key, []).append(float(row["value"]))
    return seeds, values


# ---- timing ---------------------------------------------------------------------------
def interleaved_seconds_per_iteration(
    builders: dict[str, Callable[[], Any]], timing_iters: int
) -> dict[str, float]:
    """Median seconds of ``Algorithm.train()`` per variant, trained in turns.

    Every variant takes one iteration before the next one does, so all see the same
    machine state; the first (warm-up) iteration of each is dropped.
    """
    algorithms = {name: build() for name, build in builders.items()}
    times: dict[str, list[float]] = {name: [] for name in algorithms}
    try:
        for iteration in range(timing_iters + 1):
            for name, algorithm in algorithms.items():
                start = time.perf_counter()
                algorithm.train()
                if iteration > 0:
                    times[name].append(time.perf_counter() - start)
    finally:
        for algorithm in algorithms.values():
            algorithm.stop()
    return {name: statistics.median(values) for name, values in times.items()}
