"""An experiment's ``summary.md``: per task, each algorithm's mean score over seeds at
the budget with its 95% confidence interval.

A run's score is its last evaluation's mean (the policy at the budget; win rate where
the env reports success, else team return). A run without evaluations scores its last
training iteration's mean team return, and the table says so. (``marllib-ext report``
scores the best policy re-evaluated, marl-eval's ``absolute_metrics``.)"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from marllib_ext.algos.evaluation import BUDGET_POINTS_FILE
from marllib_ext.configs.run_file import RunSpec
from marllib_ext.experiments.spec import Experiment, Trial
from marllib_ext.ops.statistics import student_t_interval
from marllib_ext.report import METRICS_FILE, run_steps, single_run

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
        evaluations = run_steps(single_run(data))
        if evaluations:
            last = evaluations[-1]
            metric = "win_rate" if "win_rate" in last else "return"
            return float(np.mean(last[metric])), metric, float(last["step_count"])
    if rows:
        return float(rows[-1]["episode_return_mean"]), TRAINING_RETURN, steps
    return None


def stored_run_finished(run: RunSpec, run_dir: Path) -> bool:
    """Whether ``run_dir`` holds ``run`` finished as stored results keep it (without its
    checkpoint): the last progress row reached a stop criterion and the end-of-run
    evaluations asked for are written (the best policy re-evaluated, EFX's budget
    points)."""
    progress = run_dir / "progress.csv"
    if not progress.exists():
        return False
    with open(progress, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or not any(
        float(rows[-1].get(column) or "nan") >= float(limit) for column, limit in run.stop.items()
    ):
        return False
    evaluation = run.evaluation
    if evaluation.get("evaluation_budgets") and not (run_dir / BUDGET_POINTS_FILE).exists():
        return False
    metrics = run_dir / METRICS_FILE
    if evaluation.get("evaluation_interval") and evaluation.get("evaluation_final_episodes") != 0:
        if not metrics.exists():
            return False
        run_record = single_run(json.loads(metrics.read_text()))
        return bool(run_record.get("absolute_metrics")) or not run_steps(run_record)
    return True


def summary_table(experiment: Experiment, trials: list[Trial], runs_root: Path) -> str:
    """The Markdown of ``summary.md``."""
    budget = ", ".join(f"{v:,.0f} {k}".replace("_", " ") for k, v in _stop(experiment).items())
    lines = [
        f"# {experiment.name}",
        "",
        *([experiment.description.strip(), ""] if experiment.description else []),
        "Each cell: the mean over seeds with its 95% confidence interval (Student's t) of "
        f"each run's last evaluation, each run trained until {budget}; `n`: runs with a "
        "record, `env steps`: their mean at that evaluation.",
    ]
    for task in experiment.tasks:
        lines += ["", f"## {task.label}", ""]
        lines += [
            "| algorithm | metric | mean [95% CI] | n | env steps | per seed |",
            "|---|---|---|---|---|---|",
        ]
        for algorithm in experiment.algorithms:
            planned = [
                trial
                for trial in trials
                if trial.task == task.label and trial.algorithm == algorithm.label
            ]
            if not planned:  # the algorithm names other tasks only
                continue
            scores, steps, metric = [], [], ""
            for trial in planned:
                scored = run_score(runs_root / trial.path)
                if scored is not None:
                    scores.append(scored[0])
                    metric = scored[1]
                    steps.append(scored[2])
            if not scores:
                lines.append(f"| `{algorithm.label}` | – | not run yet | 0 | | |")
                continue
            mean, low, high = student_t_interval(np.asarray(scores))
            cell = f"{mean:.3f}" if math.isnan(low) else f"{mean:.3f} [{low:.3f}, {high:.3f}]"
            each = ", ".join(f"{s:.3f}" for s in scores)
            at = f"{np.mean(steps):,.0f}"
            lines.append(
                f"| `{algorithm.label}` | {metric} | {cell} | {len(scores)} | {at} | {each} |"
            )
    return "\n".join(lines) + "\n"


def _stop(experiment: Experiment) -> dict[str, float]:
    from marllib_ext.configs.run_file import stop_names

    return stop_names(experiment.stop)


def write_summary(
    experiment: Experiment, root: Path, trials: list[Trial], runs_dir: str = "runs"
) -> Path:
    path = Path(root) / SUMMARY_FILE
    path.write_text(summary_table(experiment, trials, Path(root) / runs_dir))
    return path
