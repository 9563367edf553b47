"""An experiment's ``summary.md``: per task, each algorithm's mean score over seeds at
the budget with its 95% confidence interval.

A run's score is what ``marllib-ext report`` scores: its marl-eval ``absolute_metrics``
mean (the best evaluation's policy re-evaluated) where recorded, else its last
evaluation's mean (win rate where the env reports success, else team return). A run
without evaluations scores its last training iteration's mean team return, and the
table says so."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from marllib_ext.experiments.spec import Experiment, Trial
from marllib_ext.ops.statistics import student_t_interval
from marllib_ext.report import METRICS_FILE, final_score

SUMMARY_FILE = "summary.md"
TRAINING_RETURN = "training return"


def run_score(run_dir: Path) -> tuple[float, str, float] | None:
    """``(score, metric, env steps)`` of one finished or partial run; ``None`` without
    any record."""
    metrics = run_dir / METRICS_FILE
    progress = run_dir / "progress.csv"
    steps = math.nan
    rows = []
    if progress.exists():
        with open(progress, newline="") as f:
            rows = list(csv.DictReader(f))
        if rows:
            steps = float(rows[-1]["timesteps_total"])
    if metrics.exists():
        data = json.loads(metrics.read_text())
        ((_, tasks),) = data.items()
        ((_, algorithms),) = tasks.items()
        ((_, seeds),) = algorithms.items()
        ((_, run),) = seeds.items()
        evaluations = [run[k] for k in run if k.startswith("step_")]
        if evaluations:
            metric = "win_rate" if "win_rate" in evaluations[0] else "return"
            return final_score(run, metric), metric, steps
    if rows:
        return float(rows[-1]["episode_return_mean"]), TRAINING_RETURN, steps
    return None


def summary_table(experiment: Experiment, trials: list[Trial], runs_root: Path) -> str:
    """The Markdown of ``summary.md``."""
    budget = ", ".join(f"{v:,.0f} {k}".replace("_", " ") for k, v in _stop(experiment).items())
    lines = [
        f"# {experiment.name}",
        "",
        *([experiment.description.strip(), ""] if experiment.description else []),
        f"Each cell: the mean over seeds with its 95% confidence interval (Student's t), "
        f"each run trained until {budget}; `n`: runs with a record.",
    ]
    for task in experiment.tasks:
        lines += ["", f"## {task.label}", ""]
        lines += ["| algorithm | metric | mean [95% CI] | n | per seed |", "|---|---|---|---|---|"]
        for algorithm in experiment.algorithms:
            scores, metric = [], ""
            for trial in trials:
                if trial.task != task.label or trial.algorithm != algorithm.label:
                    continue
                scored = run_score(runs_root / trial.path)
                if scored is not None:
                    scores.append(scored[0])
                    metric = scored[1]
            if not scores:
                lines.append(f"| `{algorithm.label}` | – | not run yet | 0 | |")
                continue
            mean, low, high = student_t_interval(np.asarray(scores))
            cell = f"{mean:.3f}" if math.isnan(low) else f"{mean:.3f} [{low:.3f}, {high:.3f}]"
            each = ", ".join(f"{s:.3f}" for s in scores)
            lines.append(f"| `{algorithm.label}` | {metric} | {cell} | {len(scores)} | {each} |")
    return "\n".join(lines) + "\n"


def _stop(experiment: Experiment) -> dict[str, float]:
    from marllib_ext.algos.run_file import stop_names

    return stop_names(experiment.stop)


def write_summary(
    experiment: Experiment, root: Path, trials: list[Trial], runs_dir: str = "runs"
) -> Path:
    path = Path(root) / SUMMARY_FILE
    path.write_text(summary_table(experiment, trials, Path(root) / runs_dir))
    return path
