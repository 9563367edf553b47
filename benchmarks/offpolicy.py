"""Off-policy families (iql, vdn, qmix, iddpg, maddpg, facmac) against mappo: learning
at equal env-step budgets over seeds, and speed from one interleaved run.

Learning (resumable: a run whose CSV reached ``--steps`` is read, not rerun)::

    python benchmarks/offpolicy.py --task mpe:simple_spread --labels qmix vdn iql mappo \\
        --seeds 0 1 2 --steps 500000
    python benchmarks/offpolicy.py --task mpe:simple_spread --continuous \\
        --labels maddpg facmac iddpg mappo --seeds 0 1 2 --steps 500000
    python benchmarks/offpolicy.py --task mpe:simple_spread --labels qmix qmix_js qmix_kl

A settings variant goes under its own label directory (``<label>_<tag>``)::

    python benchmarks/offpolicy.py --task mpe:simple_spread --continuous --labels facmac \
        --set actor_lr=0.0005 critic_lr=0.0005 --tag lr5e-4 --steps 100000

Two runs at once on a 2-core machine: start each with ``OMP_NUM_THREADS=1`` (two torch
processes with two threads each ran the DDPG updates about 6x slower).

Table of the runs finished so far (trains nothing)::

    python benchmarks/offpolicy.py --task mpe:simple_spread --labels qmix mappo --report

Speed (every label built at once, trained in turns; env steps and learner updates per
second, and the ratio to mappo's)::

    python benchmarks/offpolicy.py --task mpe:simple_spread --labels qmix mappo --timing 5

Each CSV (``<out>/<task>/<label>/seed<k>.csv``) holds env steps, the team and per-agent
return and the algorithm's progress columns (exploration, buffer, |TD error|, Q).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import numpy as np
import ray
from ray.rllib.utils.metrics import LEARNER_RESULTS
from run_csv import finished_run, window_mean

from marllib_ext import algos, make_env
from marllib_ext.algos.evaluation import run_episodes
from marllib_ext.algos.team_replay import PROGRESS_KEY
from marllib_ext.cli import parse_assignments

# label -> (algorithm, overrides)
LABELS: dict[str, tuple[str, dict]] = {
    "qmix": ("qmix", {}),
    "vdn": ("vdn", {}),
    "iql": ("iql", {}),
    "qmix_js": ("qmix", {"per_type": "JS"}),
    "qmix_kl": ("qmix", {"per_type": "KL"}),
    "qmix_per": ("qmix", {"per_type": "PER"}),
    "maddpg": ("maddpg", {}),
    "facmac": ("facmac", {}),
    # MARLlib's FACMAC: no twin critics, no target smoothing (diverged here,
    # docs/benchmarks/off_policy.md)
    "facmac_marllib": ("facmac", {"twin_q": False, "smooth_target_policy": False}),
    "iddpg": ("iddpg", {}),
    "mappo": ("mappo", {}),
}
WINDOW = 5  # iterations averaged for a run's final return (--window)


def env_of(args) -> object:
    env_args = parse_assignments(args.env_arg, "--env-arg")
    if args.continuous:
        env_args["continuous_actions"] = True
    return make_env(args.task, **env_args)


def build(label: str, env, seed: int, extra: dict):
    name, overrides = LABELS[label]
    return algos.get(name, **{**overrides, **extra}).rllib_config(env, seed=seed).build_algo()


def team_return(result: dict) -> float:
    return float(result.get("env_runners", {}).get("episode_return_mean", math.nan))


def twin_target_gap(result: dict) -> float:
    """How far ``twin_q``'s min lowered the bootstrap in the last update, averaged over
    the teams that log it (``facmac``); NaN without twin mixers."""
    learners = result.get(LEARNER_RESULTS, {})
    gaps = [v["twin_target_gap"] for v in learners.values() if "twin_target_gap" in v]
    return float(np.mean(gaps)) if gaps else math.nan


def per_agent_return(result: dict) -> float:
    returns = result.get("env_runners", {}).get("agent_episode_returns_mean") or {}
    return float(np.mean(list(returns.values()))) if returns else math.nan


def run_name(label: str, args) -> str:
    return f"{label}_{args.tag}" if args.tag else label


def learn(label: str, seed: int, args, out: Path) -> list[dict] | None:
    path = out / run_name(label, args) / f"seed{seed}.csv"
    if (rows := finished_run(path, args.steps)) is not None:
        return rows
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = algos.get_algo_spec(LABELS[label][0])
    algorithm = build(label, env_of(args), seed, parse_assignments(args.set, "--set"))
    fields = ["timesteps_total", "time_total_s", "team_return", "per_agent_return"]
    fields += [column.name for column in spec.progress_columns] + ["twin_target_gap"]
    rows: list[dict] = []
    try:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            while not rows or rows[-1]["timesteps_total"] < args.steps:
                result = algorithm.train()
                row = {
                    "timesteps_total": int(
                        result["env_runners"].get("num_env_steps_sampled_lifetime", 0)
                    ),
                    "time_total_s": float(result.get("time_total_s", math.nan)),
                    "team_return": team_return(result),
                    "per_agent_return": per_agent_return(result),
                    **spec.progress(result),
                    "twin_target_gap": twin_target_gap(result),
                }
                writer.writerow(row)
                f.flush()
                rows.append(row)
        if args.eval_episodes:
            write_greedy_eval(algorithm, path, args.eval_episodes, rows[-1])
    finally:
        algorithm.stop()
    return rows


def write_greedy_eval(algorithm, path: Path, episodes: int, last_row: dict) -> None:
    """``<seed>_eval.json``: the trained team's mean team return over ``episodes``
    episodes without exploration (greedy Q, deterministic actors, PPO's mode), as
    EPyMARL tests (``test_greedy``)."""
    if algorithm.env_runner is not None and algorithm.env_runner.env is not None:
        team, _, _ = run_episodes(algorithm.env_runner, episodes, explore=False)
    else:  # sampling in remote runners (PPO): the first one plays
        team, _, _ = algorithm.env_runner_group.foreach_env_runner(
            lambda runner: run_episodes(runner, episodes, explore=False),
            remote_worker_ids=[1],
            local_env_runner=False,
        )[0]
    path.with_name(f"{path.stem}_eval.json").write_text(
        json.dumps(
            {
                "env_steps": int(last_row["timesteps_total"]),
                "episodes": len(team),
                "greedy_team_return": float(np.mean(team)),
                "wall_s": float(last_row["time_total_s"]),
            },
            indent=1,
        )
    )


def greedy_eval(path: Path) -> float | None:
    eval_path = path.with_name(f"{path.stem}_eval.json")
    return json.loads(eval_path.read_text())["greedy_team_return"] if eval_path.exists() else None


def spread(values: list[float]) -> str:
    return f"{np.mean(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def final_mean(rows: list[dict], key: str, args) -> float:
    """Mean of ``key`` over the last ``--window`` iterations, or over the iterations that
    ended in the last ``--window-steps`` env steps (comparable across iteration sizes)."""
    if args.window_steps:
        last = rows[-1]["timesteps_total"]
        rows = [r for r in rows if r["timesteps_total"] > last - args.window_steps]
        return window_mean(rows, key, len(rows))
    return window_mean(rows, key, args.window)


def finished_runs(label_dir: Path, args) -> list[list[dict]]:
    """The rows of every ``--seeds`` run under ``label_dir`` that reached ``--steps``."""
    runs = [finished_run(label_dir / f"seed{s}.csv", args.steps) for s in args.seeds]
    return [rows for rows in runs if rows is not None]


def report(args, out: Path) -> None:
    print(
        f"{args.task}{' (continuous)' if args.continuous else ''}, {args.steps:,} env steps, "
        + (
            f"mean over the last {args.window_steps:,} env steps"
            if args.window_steps
            else f"mean of the last {args.window} iterations"
        )
    )
    print(
        "| label | seeds | team return | per-agent return | |TD error| | Q | exploration "
        "| twin target gap | sampling TV from uniform | greedy team return |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label in args.labels:
        name = run_name(label, args)
        if not (runs := finished_runs(out / name, args)):
            continue
        cells = [spread([final_mean(r, "team_return", args) for r in runs])]
        cells.append(spread([final_mean(r, "per_agent_return", args) for r in runs]))
        for column in (
            "replay_td_error", "replay_q", "replay_exploration", "twin_target_gap",
            "replay_sampling_tv",
        ):  # fmt: skip
            values = [final_mean(r, column, args) for r in runs if column in r[0]]
            cells.append(spread(values) if values and not np.isnan(values).all() else "-")
        greedy = [greedy_eval(out / name / f"seed{s}.csv") for s in args.seeds]
        greedy = [g for g in greedy if g is not None]
        cells.append(f"{spread(greedy)} ({len(greedy)})" if greedy else "-")
        print(f"| `{name}` | {len(runs)} | " + " | ".join(cells) + " |")
    if args.curve_at:
        curve(args, out)


def curve(args, out: Path) -> None:
    """Team return over ``--window-steps`` (or 10k) env steps ending at each of
    ``--curve-at``: mean [min, max] over the seeds, a learning curve as a table."""
    width = args.window_steps or 10_000
    print(f"\nteam return over the {width:,} env steps ending at:")
    print("| label | " + " | ".join(f"{s:,}" for s in args.curve_at) + " |")
    print("|---|" + "---|" * len(args.curve_at))
    for label in args.labels:
        name = run_name(label, args)
        if not (runs := finished_runs(out / name, args)):
            continue
        cells = []
        for end in args.curve_at:
            values = [
                window_mean(
                    [r for r in rows if end - width < r["timesteps_total"] <= end],
                    "team_return",
                    len(rows),
                )
                for rows in runs
            ]
            cells.append(spread(values))
        print(f"| `{name}` | " + " | ".join(cells) + " |")


def updates_in(result: dict, label: str, env) -> float:
    """Gradient updates the learner took this iteration (PPO: epochs x minibatches)."""
    if PROGRESS_KEY in result:
        return float(result[PROGRESS_KEY]["updates"])
    settings = algos.get(LABELS[label][0]).settings(env)
    batch = settings.train_batch_size
    return float(settings.num_epochs * (batch // (settings.minibatch_size or batch)))


def timing(args) -> None:
    env = env_of(args)
    extra = parse_assignments(args.set, "--set")
    algorithms = {label: build(label, env, 0, extra) for label in args.labels}
    steps = {label: 0.0 for label in algorithms}
    updates = {label: 0.0 for label in algorithms}
    seconds = {label: 0.0 for label in algorithms}
    try:
        # Off-policy learners take no update before their buffers hold batch_episode
        # episodes: warm up until every one has updated once, then time in turns.
        for label, algorithm in algorithms.items():
            for _ in range(200):
                result = algorithm.train()
                if updates_in(result, label, env) > 0:
                    break
        for _ in range(args.timing):
            for label, algorithm in algorithms.items():
                before = time.perf_counter()
                result = algorithm.train()
                seconds[label] += time.perf_counter() - before
                steps[label] += result["env_runners"].get("num_env_steps_sampled", 0)
                updates[label] += updates_in(result, label, env)
    finally:
        for algorithm in algorithms.values():
            algorithm.stop()
    base = "mappo" if "mappo" in algorithms else next(iter(algorithms))
    base_steps, base_updates = steps[base] / seconds[base], updates[base] / seconds[base]
    print(
        f"| label | env steps/s | learner updates/s | env steps/s / {base} | updates/s / {base} |"
    )
    print("|---|---|---|---|---|")
    for label in algorithms:
        sps, ups = steps[label] / seconds[label], updates[label] / seconds[label]
        print(
            f"| `{label}` | {sps:.0f} | {ups:.2f} | {sps / base_steps:.2f} "
            f"| {ups / base_updates:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mpe:simple_spread")
    parser.add_argument("--env-arg", nargs="*", default=[])
    parser.add_argument("--continuous", action="store_true", help="continuous_actions=true")
    parser.add_argument("--labels", nargs="+", choices=sorted(LABELS), default=["qmix", "mappo"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--timing", type=int, default=0, help="timed iterations per label")
    parser.add_argument("--report", action="store_true")
    parser.add_argument(
        "--window", type=int, default=WINDOW, help="iterations averaged for the final return"
    )
    parser.add_argument(
        "--curve-at", type=int, nargs="*", default=[], help="--report: env steps of a curve table"
    )
    parser.add_argument("--set", nargs="*", default=[], help="KEY=VALUE settings overrides")
    parser.add_argument("--tag", default="", help="suffix of the label directory for --set runs")
    parser.add_argument(
        "--window-steps", type=int, default=0, help="average over these last env steps instead"
    )
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=100,
        help="greedy episodes after training (seed<k>_eval.json); 0: none",
    )
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/offpolicy"))
    args = parser.parse_args()
    task_dir = args.task.replace(":", "-") + ("-continuous" if args.continuous else "")
    out = args.out / task_dir
    if args.report:
        report(args, out)
        return
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    if args.timing:
        timing(args)
        return
    for seed in args.seeds:
        for label in args.labels:
            rows = learn(label, seed, args, out)
            print(
                f"{label} seed {seed}: team return "
                f"{window_mean(rows, 'team_return', args.window):.2f}",
                flush=True,
            )
    report(args, out)


if __name__ == "__main__":
    main()
