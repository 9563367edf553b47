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
