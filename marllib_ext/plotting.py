"""Learning curves from run directories (``marllib-ext plot``); needs matplotlib."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from marllib_ext.errors import ConfigError

X_FIELD = "timesteps_total"


def read_progress(path: Path) -> dict[str, np.ndarray]:
    """Columns of one ``progress.csv`` (or any CSV with the same header) as arrays."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return {}
    return {key: np.array([float(row[key]) for row in rows]) for key in rows[0]}


def find_progress_files(run_dir: Path) -> list[Path]:
    """``run_dir/progress.csv``, or every ``progress.csv``/``*.csv`` run file below it."""
    if (run_dir / "progress.csv").exists():
        return [run_dir / "progress.csv"]
    files = sorted(run_dir.rglob("progress.csv")) or sorted(run_dir.glob("*.csv"))
    if not files:
        raise ConfigError(f"no progress.csv under {str(run_dir)!r}")
    return files


def trailing_mean(steps: np.ndarray, values: np.ndarray, window_steps: float) -> np.ndarray:
    """``out[i]``: mean of the ``values[j]`` with ``steps[i] - window_steps < steps[j] <=
    steps[i]`` (``steps`` ascending), NaN rows skipped; ``window_steps <= 0``: unchanged."""
    if window_steps <= 0:
        return values
    finite = np.isfinite(values)
    sums = np.concatenate([[0.0], np.cumsum(np.where(finite, values, 0.0))])
    counts = np.concatenate([[0], np.cumsum(finite)])
    first = np.searchsorted(steps, steps - window_steps, side="right")
    last = np.arange(1, len(values) + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (sums[last] - sums[first]) / (counts[last] - counts[first])


def band(curves: list[dict[str, np.ndarray]], metric: str) -> tuple[np.ndarray, ...]:
    """Mean, min and max of ``metric`` over runs on a shared env-step grid.

    Each run is interpolated onto the steps of the shortest run (no extrapolation).
    """
    usable = [c for c in curves if metric in c and len(c[X_FIELD]) > 0]
    if not usable:
        raise ConfigError(f"no run has the column {metric!r}")
    end = min(c[X_FIELD][-1] for c in usable)
    grid = np.unique(np.concatenate([c[X_FIELD][c[X_FIELD] <= end] for c in usable]))
    values = np.stack([np.interp(grid, c[X_FIELD], c[metric]) for c in usable])
    return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def plot_runs(
    run_dirs: list[str | Path],
    out: str | Path,
    *,
    metric: str = "agent_return_mean",
    title: str | None = None,
    smooth_steps: float = 0,
) -> Path:
    """One curve per run directory argument: mean over the runs found in it (seeds)
    with a min-max band; x is env steps. ``smooth_steps``: each run's ``metric`` is first
    averaged over its rows in that many env steps (``trailing_mean``), so runs with
    iterations of different sizes smooth alike. Returns the written image path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ConfigError(
            "plot needs matplotlib: pip install -c constraints.txt -e '.[plot]'"
        ) from e
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for run_dir in map(Path, run_dirs):
        if not run_dir.exists():
            raise ConfigError(f"run directory {str(run_dir)!r} does not exist")
        curves = [read_progress(path) for path in find_progress_files(run_dir)]
        for curve in curves:
            if metric in curve:
                curve[metric] = trailing_mean(curve[X_FIELD], curve[metric], smooth_steps)
        grid, mean, low, high = band(curves, metric)
        label = f"{run_dir.name} ({len(curves)} run{'s' if len(curves) > 1 else ''})"
        (line,) = axis.plot(grid, mean, label=label)
        axis.fill_between(grid, low, high, color=line.get_color(), alpha=0.2)
    axis.set_xlabel("env steps")
    axis.set_ylabel(metric.replace("_", " "))
    axis.grid(alpha=0.3)
    if title:
        axis.set_title(title)
    axis.legend()
    return save_figure(figure, out)


def save_figure(figure, out: str | Path) -> Path:
    """Writes ``figure`` to ``out`` (its folder made), 120 dpi, and closes it."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)
    plt.close(figure)
    return out
