"""The evaluations at the end of a run: the best evaluation's policy re-evaluated
with ten times the episodes (marl-eval's ``absolute_metrics``) and, for EFX, played
from chosen budgets (``budget_points``), written by ``evaluation.MarlEvalRecord`` to the
run's ``metrics.json`` and ``budget_points.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marllib_ext.algos.efx.deployment import budget_range, has_budget, play_at_budget
from marllib_ext.algos.evaluation import BEST_CHECKPOINT, MarlEvalRecord, run_episodes
from marllib_ext.errors import ConfigError
from marllib_ext.rllib_compat.checkpoints import without_replay

ABSOLUTE_EPISODES_FACTOR = 10


def final_episodes(settings: Any) -> int:
    """Episodes of the end-of-run re-evaluation (0: none)."""
    chosen = getattr(settings, "evaluation_final_episodes", None)
    return (
        ABSOLUTE_EPISODES_FACTOR * int(settings.evaluation_duration) if chosen is None else chosen
    )


def best_reevaluated(algorithm, checkpoint: Path, settings: Any) -> dict[str, list[float]] | None:
    """The policy of the best evaluation (its checkpoint, restored into ``algorithm``)
    evaluated over ``final_episodes`` episodes on the evaluation runner: marl-eval's
    ``absolute_metrics`` (``None`` with 0 episodes: nothing is restored or played)."""
    episodes = final_episodes(settings)
    if episodes == 0:
        return None
    with without_replay(algorithm):  # the trained store stays; the snapshot has none
        algorithm.restore_from_path(str(Path(checkpoint).resolve()))
    algorithm.eval_env_runner_group.sync_weights(
        from_worker_or_learner_group=algorithm.learner_group, inference_only=True
    )
    coverage: list[int] = []
    returns, _, successes = run_episodes(
        algorithm.eval_env_runner, episodes, bool(settings.evaluation_explore), coverage
    )
    out = {"return": [float(v) for v in returns[:episodes]]}
    if successes:
        out["win_rate"] = [float(v) for v in successes[:episodes]]
    if coverage:
        out["coverage"] = [float(v) for v in coverage[:episodes]]
    return out


def budget_points(algorithm, settings: Any, checkpoint: Path | None) -> dict[str, dict] | None:
    """EFX's ``evaluation_budgets``: the policy of ``checkpoint`` (the best evaluation's;
    ``None``: the current one) played from each budget ``z = z_low + f (z_high - z_low)``
    for ``final_episodes`` episodes (``evaluation_duration`` when that is 0), with the
    evaluation's action sampling: ``{f: {"z", "return", "win_rate", "coverage"}}``, one
    value per episode (``None`` without ``evaluation_budgets``)."""
    fractions = getattr(settings, "evaluation_budgets", None)
    if not fractions:
        return None
    runner = algorithm.eval_env_runner
    if not has_budget(runner):
        raise ConfigError(
            "evaluation_budgets (an experiment's evaluation.budgets) plays EFX budgets; "
            f"{type(algorithm).__name__} run of {algorithm.config.env!r} has none"
        )
    if checkpoint is not None:
        with without_replay(algorithm):
            algorithm.restore_from_path(str(Path(checkpoint).resolve()))
    algorithm.eval_env_runner_group.sync_weights(
        from_worker_or_learner_group=algorithm.learner_group, inference_only=True
    )
    episodes = final_episodes(settings) or int(settings.evaluation_duration)
    low, high = budget_range(runner)
    points = {}
    for fraction in fractions:  # the run's last use of the evaluation runner
        z = low + float(fraction) * (high - low)
        play_at_budget(runner, z)
        coverage: list[int] = []
        returns, _, successes = run_episodes(
            runner, episodes, bool(settings.evaluation_explore), coverage
        )
        point: dict[str, Any] = {"z": z, "return": [float(v) for v in returns[:episodes]]}
        if successes:
            point["win_rate"] = [float(v) for v in successes[:episodes]]
        if coverage:
            point["coverage"] = [float(v) for v in coverage[:episodes]]
        points[f"{float(fraction):g}"] = point
    return points


def record_final_evaluations(
    algorithm, settings: Any, record: MarlEvalRecord, run_dir: Path
) -> None:
    """Both end-of-run evaluations into ``record``: the best evaluation's policy
    re-evaluated (where the run evaluated), then EFX's budget points of that policy."""
    best = run_dir / BEST_CHECKPOINT if record.best is not None else None
    if best is not None:
        record.set_absolute(best_reevaluated(algorithm, best, settings))
    record.set_budget_points(budget_points(algorithm, settings, best))
