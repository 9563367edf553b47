"""Exploration benchmark: `efx_mappo` vs `mappo` vs `ippo` on sparse-reward tasks.

For each task, algorithm and seed, trains for --steps env steps and writes
``<out>/<task>/<algorithm>/seed<k>/progress.csv`` with, per iteration, env steps, mean
team return and success rate (fraction of that iteration's finished episodes with a
positive team return). Prints the final mean return and success rate per algorithm and
task, averaged over seeds. `marllib-ext plot <out>/<task>/*` draws the curves.

    python benchmarks/exploration.py --tasks grid:pass mpe:sparse_spread --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import ray

from marllib_ext import algos, make_env
from marllib_ext.algos.api import progress_row, with_episode_end_callback

ALGORITHMS = ("efx_mappo", "mappo", "ippo")
SUCCESSES, EPISODES = "bench_successes", "bench_episodes"
FIELDS = ("timesteps_total", "episode_return_mean", "success_rate", "agent_return_mean")


def log_success(*, episode, prev_episode_chunks=None, metrics_logger=None, **kwargs) -> None:
    """``on_episode_end``: success = positive team return over the whole episode."""
    chunks = [*(prev_episode_chunks or []), episode]
    metrics_logger.log_value(
        SUCCESSES, float(sum(c.get_return() for c in chunks) > 0), reduce="sum"
    )
    metrics_logger.log_value(EPISODES, 1, reduce="sum")


def run(
    task: str,
    name: str,
    seed: int,
    steps: int,
    out: Path,
    overrides: dict,
    env_args: dict,
    label: str | None = None,
) -> dict:
    config = with_episode_end_callback(
        algos.get(name, **overrides).rllib_config(make_env(task, **env_args), seed=seed),
        log_success,
    )
    algorithm = config.build_algo()
    run_dir = out / task.replace(":", "-") / (label or name) / f"seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with open(run_dir / "progress.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            while True:
                result = algorithm.train()
                runners = result.get("env_runners", {})
                episodes = runners.get(EPISODES, 0) or 0
                row = {k: v for k, v in progress_row(result).items() if k in FIELDS}
                row["success_rate"] = runners.get(SUCCESSES, 0.0) / episodes if episodes else 0.0
                writer.writerow(row)
                f.flush()
                if row["timesteps_total"] >= steps:
                    return row
    finally:
        algorithm.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["grid:pass", "mpe:sparse_spread"])
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=40_000, help="env steps per run")
    parser.add_argument("--out", type=Path, default=Path("runs/exploration"))
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="hyperparameter overrides for every run (YAML values)",
    )
    parser.add_argument(
        "--env-arg", nargs="*", default=[], metavar="KEY=VALUE", help="env constructor arguments"
    )
    parser.add_argument(
        "--label", default=None, help="run folder name instead of the algorithm (for sweeps)"
    )
    args = parser.parse_args()
    from marllib_ext.cli import parse_assignments

    overrides = parse_assignments(args.set, "--set")
    env_args = parse_assignments(args.env_arg, "--env-arg")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    table = {}
    for task in args.tasks:
        for name in args.algorithms:
            finals = [
                run(task, name, seed, args.steps, args.out, overrides, env_args, args.label)
                for seed in args.seeds
            ]
            key = (task, args.label or name)
            table[key] = (
                float(np.mean([r["episode_return_mean"] for r in finals])),
                float(np.mean([r["success_rate"] for r in finals])),
            )
            print(
                f"{task:<18} {key[1]:<10} return {table[key][0]:8.3f} success {table[key][1]:.3f}",
                flush=True,
            )
    ray.shutdown()
    print(
        f"\n{'task':<18} {'algorithm':<10} {'team return':>12} {'success rate':>13}  "
        f"(mean over seeds {args.seeds}, {args.steps} env steps, env {env_args}, "
        f"overrides {overrides})"
    )
    for (task, name), (ret, success) in table.items():
        print(f"{task:<18} {name:<10} {ret:12.3f} {success:13.3f}")
    print(json.dumps({f"{t}/{n}": v for (t, n), v in table.items()}))


if __name__ == "__main__":
    main()
