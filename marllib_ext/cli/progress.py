"""The progress line printed per training iteration."""

from __future__ import annotations

import math
from collections import Counter


def format_row(row: dict[str, float], columns=()) -> str:
    """The progress line; ``columns``: the algorithm's own progress columns, shown once
    the first of them has a value."""
    extra = ""
    if columns and not math.isnan(row.get(columns[0].name, math.nan)):
        extra = " | " + " ".join(f"{c.label} {row[c.name]:{c.fmt}}" for c in columns)
    success = row.get("success_rate", math.nan)
    won = "" if math.isnan(success) else f" | success {success:.2f}"
    evaluated = row.get("eval_return_mean", math.nan)
    if not math.isnan(evaluated):
        wins = row.get("eval_success_rate", math.nan)
        won += f" | eval return {evaluated:.3f}" + ("" if math.isnan(wins) else f" win {wins:.2f}")
    return (
        f"iter {row['training_iteration']:4d} | env steps {row['timesteps_total']:8d} | "
        f"episode return {row['episode_return_mean']:9.3f} "
        f"(per agent {row['agent_return_mean']:8.3f}){won} | "
        f"{row['time_this_iter_s']:6.2f} s/iter, {row['time_total_s']:7.1f} s total{extra}"
        + _runner_health(row)
    )


def _runner_health(row: dict[str, float]) -> str:
    total = row.get("env_runners", math.nan)
    if not total or math.isnan(total):
        return ""
    return f" | env runners {int(row['env_runners_healthy'])}/{int(total)} healthy"


def print_runner_nodes(algorithm) -> None:
    """Which Ray node serves each remote env runner (a multi-node run shows several)."""
    import ray

    counts = Counter(
        algorithm.env_runner_group.foreach_env_runner(
            lambda runner: ray.get_runtime_context().get_node_id(), local_env_runner=False
        )
    )
    if counts:
        served = ", ".join(f"{node} x{count}" for node, count in sorted(counts.items()))
        print(f"env runners on nodes: {served}", flush=True)


def print_sampling(algorithm) -> None:
    """How the env runners that sample (the remote ones, else the local one) sample:
    ``sampling: rollout blocks`` or the path taken with the reason a cheaper one was
    refused (``rollout.env_runner.BatchedEnvRunner.choose_sampler``)."""
    group = algorithm.env_runner_group
    remote = group.num_remote_env_runners() > 0
    described = group.foreach_env_runner(
        lambda runner: getattr(runner, "sampling", None), local_env_runner=not remote
    )
    for line in sorted({d for d in described if d}):
        print(line, flush=True)


def print_run_start(algorithm) -> None:
    """What ``train`` prints once the algorithm is built."""
    print_sampling(algorithm)
    print_runner_nodes(algorithm)
