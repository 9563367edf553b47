"""``marllib-ext report``: runs' marl-eval records (``metrics.json``, written by
evaluation during training) aggregated as the field reports them (``ops.statistics``):
the interquartile mean, median, mean and optimality gap with 95% stratified-bootstrap
intervals, the probability of improvement between every pair of algorithms,
performance profiles and sample-efficiency curves, as a Markdown table and PNGs.

A run's final score on its task is its ``absolute_metrics`` mean (the best policy
re-evaluated) where recorded, else its last evaluation's mean. Scores are pooled over
tasks after min-max normalization per task (``--normalize minmax``, the default for
returns; win rates are already on ``[0, 1]``)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from marllib_ext.errors import ConfigError
from marllib_ext.ops.statistics import (
    AGGREGATES,
    interval,
    iqm,
    min_max_normalized,
    performance_profile,
    probability_of_improvement,
)

METRICS_FILE = "metrics.json"


def find_metric_files(paths: list[str | Path]) -> list[Path]:
    """Every ``metrics.json`` given or found under the given directories."""
    files = []
    for path in map(Path, paths):
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(sorted(path.rglob(METRICS_FILE)))
        else:
            raise ConfigError(f"run directory {str(path)!r} does not exist")
    if not files:
        raise ConfigError(
            f"no {METRICS_FILE} under {[str(p) for p in paths]}: train with --eval-every"
        )
    return files


def load_records(files: list[Path]) -> dict[tuple[str, str], dict[str, dict[str, dict]]]:
    """``{(env, task): {algorithm: {seed: run}}}`` of marl-eval files; a (task,
    algorithm, seed) found twice is refused, naming both files."""
    records: dict[tuple[str, str], dict[str, dict[str, dict]]] = {}
    origin: dict[tuple, Path] = {}
    for file in files:
        data = json.loads(file.read_text())
        for env, tasks in data.items():
            for task, algorithms in tasks.items():
                for algorithm, seeds in algorithms.items():
                    for seed, run in seeds.items():
                        key = (env, task, algorithm, seed)
                        if key in origin:
                            raise ConfigError(
                                f"{algorithm} {seed} on {env}:{task} is in both "
                                f"{origin[key]} and {file}"
                            )
                        origin[key] = file
                        records.setdefault((env, task), {}).setdefault(algorithm, {})[seed] = run
    return records


def run_steps(run: dict) -> list[dict]:
    """A seed record's evaluations in order (``step_0``, ``step_1``, ...)."""
    return [run[k] for k in sorted((k for k in run if k.startswith("step_")), key=_index)]


def single_run(data: dict) -> dict:
    """The seed record of a one-run ``metrics.json`` (one env, task, algorithm, seed)."""
    ((_, tasks),) = data.items()
    ((_, algorithms),) = tasks.items()
    ((_, seeds),) = algorithms.items()
    ((_, run),) = seeds.items()
    return run


def _index(step_key: str) -> int:
    return int(step_key.split("_", 1)[1])


def final_score(run: dict, metric: str) -> float:
    """The run's absolute-metric mean, else its last evaluation's mean."""
    absolute = run.get("absolute_metrics") or {}
    if absolute.get(metric):
        return float(np.mean(absolute[metric]))
    steps = run_steps(run)
    if not steps or metric not in steps[-1]:
        raise ConfigError(f"a run has no evaluation with metric {metric!r}")
    return float(np.mean(steps[-1][metric]))


@dataclass
class ReportData:
    metric: str
    tasks: list[tuple[str, str]]
    algorithms: list[str]
    scores: dict[str, np.ndarray]  # (runs, tasks), normalized as asked
    runs: int
    curve_steps: np.ndarray  # (points,) mean env steps of each evaluation index
    curves: dict[str, np.ndarray]  # (points, runs, tasks)


def report_data(
    records: dict, metric: str | None = None, normalize: str | None = None
) -> ReportData:
    """The scores of every algorithm present on every task (runs cut to the fewest any
    (algorithm, task) has, seeds in order; evaluations cut to the fewest any run has)."""
    tasks = sorted(records)
    algorithms = sorted(set.intersection(*(set(records[t]) for t in tasks)))
    if not algorithms:
        raise ConfigError("no algorithm was run on every task of the records")
    runs_of = {
        (a, t): [records[t][a][s] for s in sorted(records[t][a])] for a in algorithms for t in tasks
    }
    first = next(iter(runs_of.values()))[0]
    metrics = (
        set(run_steps(first)[0]) - {"step_count", "elapsed_time"}
        if run_steps(first)
        else {"return"}
    )
    metric = metric or ("win_rate" if "win_rate" in metrics else "return")
    runs = min(len(v) for v in runs_of.values())
    points = min(len(run_steps(run)) for v in runs_of.values() for run in v)
    scores, curves = {}, {}
    step_counts = []
    for algorithm in algorithms:
        table = np.zeros((runs, len(tasks)))
        curve = np.zeros((points, runs, len(tasks)))
        for j, task in enumerate(tasks):
            for i, run in enumerate(runs_of[(algorithm, task)][:runs]):
                table[i, j] = final_score(run, metric)
                steps = run_steps(run)[:points]
                curve[:, i, j] = [np.mean(step[metric]) for step in steps]
                step_counts.append([step["step_count"] for step in steps])
        scores[algorithm], curves[algorithm] = table, curve
    normalize = normalize or ("none" if metric == "win_rate" else "minmax")
    if normalize == "minmax":
        pooled = {
            a: np.concatenate([scores[a], curves[a].reshape(-1, len(tasks))]) for a in algorithms
        }
        scaled = min_max_normalized(pooled)
        for a in algorithms:
            scores[a] = scaled[a][:runs]
            curves[a] = scaled[a][runs:].reshape(points, runs, len(tasks))
    elif normalize != "none":
        raise ConfigError(f"--normalize must be 'minmax' or 'none', got {normalize!r}")
    return ReportData(
        metric=metric,
        tasks=tasks,
        algorithms=algorithms,
        scores=scores,
        runs=runs,
        curve_steps=np.mean(step_counts, axis=0) if step_counts else np.zeros(0),
        curves=curves,
    )


def _cell(estimate: tuple[float, float, float]) -> str:
    point, low, high = estimate
    return f"{point:.3f} [{low:.3f}, {high:.3f}]"


def write_report(data: ReportData, out: Path, *, reps: int = 2000, seed: int = 0) -> dict[str, Any]:
    """``report.md`` and the PNGs under ``out``; returns the numbers written."""
    out.mkdir(parents=True, exist_ok=True)
    aggregates = {
        a: {
            name: interval(fn, data.scores[a], reps=reps, seed=seed)
            for name, fn in AGGREGATES.items()
        }
        for a in data.algorithms
    }
    improvement = {
        (x, y): interval(
            probability_of_improvement, data.scores[x], data.scores[y], reps=reps, seed=seed
        )
        for x, y in itertools.permutations(data.algorithms, 2)
    }
    tasks = ", ".join(f"{env}:{task}" for env, task in data.tasks)
    lines = [
        f"# {data.metric.replace('_', ' ')}: {len(data.tasks)} task(s), {data.runs} run(s) each",
        "",
        f"Tasks: {tasks}. Final score per run: its best policy re-evaluated (absolute "
        "metrics) where recorded, else its last evaluation. Point estimates with 95% "
        f"stratified-bootstrap intervals ({reps} replicates).",
        "",
        "| algorithm | " + " | ".join(AGGREGATES) + " |",
        "|---|" + "---|" * len(AGGREGATES),
    ]
    for a in data.algorithms:
        lines.append(f"| `{a}` | " + " | ".join(_cell(aggregates[a][n]) for n in AGGREGATES) + " |")
    lines += ["", "Probability of improvement:", "", "| X | Y | P(X > Y) |", "|---|---|---|"]
    for (x, y), estimate in improvement.items():
        lines.append(f"| `{x}` | `{y}` | {_cell(estimate)} |")
    lines += [
        "",
        "![aggregates](aggregates.png)",
        "![probability of improvement](probability_of_improvement.png)",
        "![performance profile](performance_profile.png)",
        "![sample efficiency](sample_efficiency.png)",
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    _plots(data, aggregates, improvement, out, reps=reps, seed=seed)
    return {"aggregates": aggregates, "improvement": improvement}


def _plots(data: ReportData, aggregates, improvement, out: Path, *, reps: int, seed: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ConfigError(
            "report needs matplotlib: pip install -c constraints.txt -e '.[plot]'"
        ) from e
    from marllib_ext.plotting import save_figure

    names = data.algorithms
    figure, axes = plt.subplots(
        1, len(AGGREGATES), figsize=(3.2 * len(AGGREGATES), 0.5 + 0.45 * len(names))
    )
    for axis, stat in zip(np.atleast_1d(axes), AGGREGATES, strict=True):
        for row, a in enumerate(names):
            point, low, high = aggregates[a][stat]
            axis.plot([low, high], [row, row], linewidth=6, alpha=0.5)
            axis.plot([point], [row], "k|", markersize=12)
        axis.set_yticks(
            range(len(names)), names if axis is np.atleast_1d(axes)[0] else [""] * len(names)
        )
        axis.set_title(stat)
        axis.grid(alpha=0.3, axis="x")
    save_figure(figure, out / "aggregates.png")

    figure, axis = plt.subplots(figsize=(6, 0.6 + 0.4 * max(1, len(improvement))))
    for row, (point, low, high) in enumerate(improvement.values()):
        axis.plot([low, high], [row, row], linewidth=6, alpha=0.5)
        axis.plot([point], [row], "k|", markersize=12)
    axis.set_yticks(range(len(improvement)), [f"P({x} > {y})" for x, y in improvement])
    axis.axvline(0.5, color="gray", linestyle="--")
    axis.set_xlim(0, 1)
    save_figure(figure, out / "probability_of_improvement.png")

    figure, axis = plt.subplots(figsize=(6, 4))
    pooled = np.concatenate([data.scores[a].ravel() for a in names])
    thresholds = np.linspace(min(0.0, pooled.min()), max(1.0, pooled.max()), 101)
    for a in names:
        axis.plot(thresholds, performance_profile(data.scores[a], thresholds), label=a)
    axis.set_xlabel(f"normalized {data.metric} threshold tau")
    axis.set_ylabel("fraction of runs with score > tau")
    axis.grid(alpha=0.3)
    axis.legend()
    save_figure(figure, out / "performance_profile.png")

    figure, axis = plt.subplots(figsize=(6, 4))
    for a in names:
        estimates = [
            interval(iqm, point, reps=max(100, reps // 10), seed=seed) for point in data.curves[a]
        ]
        means, lows, highs = (
            (np.array(v) for v in zip(*estimates, strict=True)) if estimates else ([], [], [])
        )
        (line,) = axis.plot(data.curve_steps, means, label=a)
        axis.fill_between(data.curve_steps, lows, highs, color=line.get_color(), alpha=0.2)
    axis.set_xlabel("env steps")
    axis.set_ylabel(f"IQM of {data.metric}")
    axis.grid(alpha=0.3)
    axis.legend()
    save_figure(figure, out / "sample_efficiency.png")
