"""SAC with ROER replay on a gymnasium task: ``per_type`` uniform / PER / KL / JS over
seeds at an equal env-step budget, with the wall time of every run and the replay's
distance from uniform sampling (the mechanism ROER acts through).

Learning (resumable: a run whose CSV reached ``--steps`` is read, not rerun)::

    python benchmarks/roer_sac.py --env Pendulum-v1 --per-types JS uniform \\
        --seeds 0 1 2 --steps 20000
    python benchmarks/roer_sac.py --env HalfCheetah-v5 --per-types uniform PER JS \\
        --seeds 0 1 2 --steps 100000
    python benchmarks/roer_sac.py --algo isac_roer --env mpe:simple_spread \\
        --env-arg continuous_actions=true --per-types JS uniform --steps 30000

Table of the finished runs (trains nothing; ``--curve-at`` adds the training return
over the ``--curve-window`` env steps ending at each budget)::

    python benchmarks/roer_sac.py --env Pendulum-v1 --per-types JS uniform --report
    python benchmarks/roer_sac.py --env HalfCheetah-v5 --per-types uniform PER JS \
        --steps 100000 --report --curve-at 25000 50000 75000 100000

``isac_roer`` returns are team returns (one shared policy). Every run uses ``_sac.yaml``'s
settings (256x256, batch 256, one update per env step on
the fast path) with ``--fragment`` env steps sampled per training step (their updates
go to the learner in one call) and ``--set`` overrides. The CSV logs, per iteration, the
mean return of the last 10 training episodes and the sampling spread; after training
the run plays 10 episodes with the mean action (``<seed>_eval.json``, with the wall
time). Written under ``benchmarks/results/roer/<env>/<per_type><suffix>/``.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
import ray
import torch
from run_csv import finished_run, window_mean

from marllib_ext import algos, make_env
from marllib_ext.algos.evaluation import run_episodes
from marllib_ext.cli import parse_assignments

COLUMNS = (
    "timesteps_total",
    "episode_return_mean",
    "wall_s",
    "sampling_total_variation",
    "sampling_effective_fraction",
    "sampling_max_over_mean",
)
SMOOTHING_EPISODES = 10  # training return: the mean of the last 10 episodes
EVAL_EPISODES = 10
WINDOW = 3  # iterations averaged for the final training return


def train(
    algo: str, env, per_type: str, seed: int, steps: int, path: Path, overrides: dict
) -> None:
    """Trains to ``steps`` env steps, one CSV row per iteration, then evaluates."""
    if finished_run(path, steps):
        return
    config = algos.get(algo, per_type=per_type, **overrides).rllib_config(env, seed=seed)
    config.reporting(metrics_num_episodes_for_smoothing=SMOOTHING_EPISODES)
    algorithm = config.build_algo()
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(COLUMNS)
            done = 0
            while done < steps:
                result = algorithm.train()
                done = int(result["num_env_steps_sampled_lifetime"])
                replay = result.get("fast_replay", {})
                writer.writerow([
                    done,
                    result["env_runners"].get("episode_return_mean", float("nan")),
                    time.perf_counter() - start,
                    *(replay.get(c, float("nan")) for c in COLUMNS[3:]),
                ])  # fmt: skip
                f.flush()
        wall = time.perf_counter() - start
        team, _, _ = run_episodes(algorithm.env_runner, EVAL_EPISODES, explore=False)
    finally:
        algorithm.stop()
    path.with_name(f"{path.stem}_eval.json").write_text(json.dumps({
        "episodes": len(team), "mean_action_return": float(np.mean(team)),
        "env_steps": done, "wall_s": wall,
    }))  # fmt: skip


def stats(values: list[float]) -> str:
    return f"{np.mean(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def report(root: Path, labels: list[str], seeds: list[int], steps: int) -> None:
    print(
        "| per_type | seeds | training return (last 10 episodes) | mean action (10 episodes) "
        "| wall time per run (min) | sampling TV from uniform | effective fraction |"
    )
    print("|---|---|---|---|---|---|---|")
    for label in labels:
        paths = [root / label / f"seed{seed}.csv" for seed in seeds]
        runs = {p: rows for p in paths if (rows := finished_run(p, steps))}
        if not runs:
            continue
        final = [window_mean(rows, "episode_return_mean", WINDOW) for rows in runs.values()]
        evals = [
            json.loads(e.read_text())
            for p in runs
            if (e := p.with_name(f"{p.stem}_eval.json")).exists()
        ]
        mean_action = stats([e["mean_action_return"] for e in evals]) if evals else "-"
        wall = stats([e["wall_s"] / 60 for e in evals]) if evals else "-"
        tv = [window_mean(r, "sampling_total_variation", WINDOW) for r in runs.values()]
        ess = [window_mean(r, "sampling_effective_fraction", WINDOW) for r in runs.values()]
        print(
            f"| `{label}` | {len(runs)} | {stats(final)} | {mean_action} | {wall} | "
            f"{np.mean(tv):.3f} | {np.mean(ess):.3f} |"
        )


def curve(root: Path, labels: list[str], seeds: list[int], steps: int, marks, width) -> None:
    """Training return over the ``width`` env steps ending at each of ``marks``: mean
    [min, max] over the finished seeds (iterations without a finished episode skipped)."""
    print(f"\ntraining return over the {width:,} env steps ending at:")
    print("| per_type | " + " | ".join(f"{m:,}" for m in marks) + " |")
    print("|---|" + "---|" * len(marks))
    for label in labels:
        runs = [r for s in seeds if (r := finished_run(root / label / f"seed{s}.csv", steps))]
        if not runs:
            continue
        cells = []
        for mark in marks:
            values = [
                float(np.nanmean([
                    r["episode_return_mean"] for r in rows
                    if mark - width < r["timesteps_total"] <= mark
                ]))
                for rows in runs
            ]  # fmt: skip
            cells.append(f"{np.mean(values):,.0f} [{min(values):,.0f}, {max(values):,.0f}]")
        print(f"| `{label}` | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="sac_roer", choices=["sac_roer", "isac_roer"])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--env-arg", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--per-types", nargs="+", default=["uniform", "PER", "KL", "JS"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--fragment", type=int, default=8, help="env steps per training step")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--suffix", default="", help="run folder <per_type><suffix>")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/roer"))
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--curve-at", type=int, nargs="*", default=[], help="--report: budgets")
    parser.add_argument("--curve-window", type=int, default=5000, help="env steps per point")
    args = parser.parse_args()
    root = args.out / args.env.replace(":", "-")
    env = (
        make_env(args.env, **parse_assignments(args.env_arg, "--env-arg"))
        if args.algo == "isac_roer"
        else args.env
    )
    if args.report:
        labels = [f"{p}{args.suffix}" for p in args.per_types]
        report(root, labels, args.seeds, args.steps)
        if args.curve_at:
            curve(root, labels, args.seeds, args.steps, args.curve_at, args.curve_window)
        return
    overrides = {
        "rollout_fragment_length": args.fragment,
        **parse_assignments(args.set, "--set"),
    }
    if args.set and not args.suffix:
        parser.error("--set needs --suffix, so its runs get their own folder")
    torch.set_num_threads(1)  # one run per core; more threads only contend
    ray.init(num_cpus=1, include_dashboard=False, configure_logging=False, log_to_driver=False)
    for per_type in args.per_types:
        for seed in args.seeds:
            path = root / f"{per_type}{args.suffix}" / f"seed{seed}.csv"
            train(args.algo, env, per_type, seed, args.steps, path, overrides)
            print(f"{per_type} seed {seed}: done", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
