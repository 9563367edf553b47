"""Per-iteration run CSVs shared by the benchmark scripts: reading them back and the
windowed mean of a column at an env-step count."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


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
