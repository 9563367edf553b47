"""The trust-region family against `mappo` and `happo`: learning on mpe:simple_spread at
equal env-step budgets over seeds, and where a trust-region iteration's time goes
(conjugate gradient and line search) next to `mappo`'s iteration time, in one run.

Learning (resumable: a run whose CSV reached ``--steps`` is read, not rerun)::

    python benchmarks/trust_region.py --labels itrpo matrpo hatrpo ipg mappo happo \\
        --seeds 0 1 2 --steps 300000
    python benchmarks/trust_region.py --env mamujoco:HalfCheetah --env-arg agent_conf=2x3 \\
        --labels hatrpo happo mappo --seeds 0 1 2 --steps 300000

Another setting, in its own run folder (``hatrpo_kl0.05``)::

    python benchmarks/trust_region.py --env mamujoco:HalfCheetah --env-arg agent_conf=2x3 \\
        --labels hatrpo --set kl_threshold=0.05 --suffix _kl0.05 --steps 300000

The table of finished runs (trains nothing; a label names a run folder)::

    python benchmarks/trust_region.py --labels itrpo matrpo hatrpo ipg mappo happo --report

Timing (every label built at once, iterations interleaved)::

    python benchmarks/trust_region.py --labels matrpo hatrpo mappo --timing-iters 4

``happo`` / ``hatrpo`` share individually (they update policies in turn), the others
share one policy where the env allows it (simple_spread; on MaMuJoCo every algorithm
has one policy per agent); per-agent return, mean ± std over seeds [min, max].
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

import numpy as np
import ray
import torch
from run_csv import finished_run, mean_at, window_mean

from marllib_ext import algos, make_env
from marllib_ext.algos.api import progress_row
from marllib_ext.algos.evaluation import run_episodes
from marllib_ext.cli import parse_assignments

WINDOW = 5
COLUMNS = ("timesteps_total", "agent_return_mean", "tr_kl", "tr_accept_rate")
EVAL_EPISODES = 20  # after training, with the mean action (HARL evaluates 40)
# The tables in docs/benchmarks/on_policy.md: (env, labels, env steps), each label with 3 kept seeds
# under benchmarks/results/trust_region/<env>/ (a test checks the document against them).
REPORTED = (
    ("mpe:simple_spread", ["itrpo", "matrpo", "hatrpo", "ipg", "mappo", "happo"], 300_000),
    ("mamujoco:HalfCheetah", ["hatrpo", "hatrpo_kl0.05", "happo", "mappo"], 300_000),
    ("mamujoco:HalfCheetah", ["mappo_harl_1M", "happo_harl_1M", "hatrpo_harl_1M"], 1_000_000),
)


def share_policy(label: str, handle) -> str:
    """One policy where the env allows it and the algorithm updates policies at once;
    else one per agent (MaMuJoCo's agents control different joints)."""
    sequential = algos.ALGORITHMS[label].capabilities.sequential
    one_policy = handle.spec.policy_mapping.all_agents_one_policy
    return "all" if one_policy and not sequential else "individual"


def build(label: str, handle, seed: int, overrides: dict | None = None):
    return (
        algos.get(label, **(overrides or {}))
        .rllib_config(handle, share_policy=share_policy(label, handle), seed=seed)
        .build_algo()
    )


def train(
    label: str,
    handle,
    seed: int,
    steps: int,
    path: Path,
    overrides: dict | None = None,
    eval_at: tuple[int, ...] = (),
) -> None:
    """Trains to ``steps`` env steps, writing one CSV row per iteration; at the first
    iteration past each of ``eval_at`` and after training, plays whole episodes with the
    mean action."""
    if finished_run(path, steps):
        return
    algo = build(label, handle, seed, overrides)
    spec = algos.ALGORITHMS[label]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        done = 0
        pending = sorted(eval_at)
        while done < steps:
            row = progress_row(algo.train(), spec)
            done = int(row["timesteps_total"])
            writer.writerow([row.get(c, float("nan")) for c in COLUMNS])
            f.flush()
            while pending and done >= pending[0]:
                evaluate_mean_action(algo, eval_path(path, pending.pop(0)), done)
    evaluate_mean_action(algo, eval_path(path), done)
    algo.stop()


def evaluate_mean_action(algo, out: Path, env_steps: int) -> None:
    """HARL's evaluation: whole episodes with the mean action (its ``deterministic``),
    played by a separate one-env runner holding the trained weights, so that neither the
    training's env-step count nor its logged returns include them."""
    if algo.env_runner is None:  # remote runners only: no local weights to copy
        return
    config = algo.config.copy(copy_frozen=False)
    config.env_runners(num_envs_per_env_runner=1)
    # Building the runner draws from the global generators: training's stream is kept.
    torch_state, numpy_state = torch.random.get_rng_state(), np.random.get_state()
    runner = algo.env_runner.__class__(config=config)
    try:
        runner.set_state(algo.env_runner.get_state())
        team, agents, _ = run_episodes(runner, EVAL_EPISODES, explore=False)
    finally:
        runner.stop()
        torch.random.set_rng_state(torch_state)
        np.random.set_state(numpy_state)
    per_agent = float(np.mean([np.mean(returns) for returns in agents.values()]))
    out.write_text(json.dumps({
        "episodes": len(team), "deterministic_agent_return": per_agent,
        "env_steps": env_steps,
    }))  # fmt: skip


def evaluated_column(paths: list[Path], mark: int | None) -> str:
    """Mean-action returns at ``mark`` (None: after training) of the runs that wrote them."""
    evaluated = [
        json.loads(eval_path(path, mark).read_text())["deterministic_agent_return"]
        for path in paths
        if eval_path(path, mark).exists()
    ]
    if not evaluated:
        return " - |"
    return (
        f" {np.mean(evaluated):.2f} ± {np.std(evaluated):.2f} [{min(evaluated):.2f}, "
        f"{max(evaluated):.2f}] ({len(evaluated)} seeds) |"
    )


def eval_path(path: Path, mark: int | None = None) -> Path:
    """``seed0_eval.json`` after training, ``seed0_eval_300k.json`` at a mark."""
    tail = "" if mark is None else f"_{mark // 1000}k"
    return path.with_name(f"{path.stem}_eval{tail}.json")


def timing(labels: list[str], handle, iterations: int) -> None:
    """Median seconds per iteration of each label, iterations interleaved, and for the
    trust-region labels the share spent in CG and in the line search."""
    built = {label: build(label, handle, 0) for label in labels}
    seconds = {label: [] for label in labels}
    cg = {label: [] for label in labels}
    search = {label: [] for label in labels}
    for _ in range(iterations + 1):  # the first iteration is warm-up
        for label, algo in built.items():
            result = algo.train()
            seconds[label].append(result["time_this_iter_s"])
            learners = [v for v in result["learners"].values() if isinstance(v, dict)]
            cg[label].append(sum(v.get("tr_cg_s", 0.0) for v in learners))
            search[label].append(sum(v.get("tr_line_search_s", 0.0) for v in learners))
    reference = statistics.median(seconds["mappo"][1:]) if "mappo" in seconds else None
    print("| algorithm | s/iteration | / mappo | CG share | line-search share |")
    print("|---|---|---|---|---|")
    for label in labels:
        median = statistics.median(seconds[label][1:])
        ratio = f"{median / reference:.2f}" if reference else "-"
        print(
            f"| `{label}` | {median:.2f} | {ratio} | "
            f"{statistics.median(cg[label][1:]) / median:.3f} | "
            f"{statistics.median(search[label][1:]) / median:.3f} |"
        )
    for algo in built.values():
        algo.stop()


def report(labels: list[str], seeds: list[int], steps: int, root: Path) -> None:
    """One row per label with finished runs under ``root``: per-agent return at half the
    budget (and at 300k for budgets of 600k and more; mean ± std over seeds) and at the
    end ([min, max] too), each the mean of the last ``WINDOW`` logged iterations; for
    budgets of 600k and more HARL's evaluation after training (the mean action) where
    the runs wrote it; the KL after the step and the acceptance rate over the last
    window, and the largest KL of any iteration."""
    half = steps // 2
    long_run = steps >= 600_000
    marks = ([300_000] if long_run else []) + [half]
    evaluation_header = (
        f" mean action at 300k | mean action at {steps // 1000}k |" if long_run else ""
    )
    print(f"| algorithm | seeds | {' | '.join(f'at {m // 1000}k' for m in marks)} "
          f"| at {steps // 1000}k |{evaluation_header} KL after the step | largest KL "
          "| accepted |")  # fmt: skip
    print("|---" * (len(marks) + 6 + 2 * long_run) + "|")
    for label in labels:
        paths = [root / label / f"seed{seed}.csv" for seed in seeds]
        finished = {path: rows for path in paths if (rows := finished_run(path, steps))}
        runs, paths = list(finished.values()), list(finished)
        if not runs:
            continue
        at_marks = []
        for mark in marks:
            values = [mean_at(r, mark, "agent_return_mean", WINDOW) for r in runs]
            at_marks.append(f"{np.mean(values):.2f} ± {np.std(values):.2f}")
        final = [window_mean(r, "agent_return_mean", WINDOW) for r in runs]
        evaluation = ""
        if long_run:
            evaluation = evaluated_column(paths, 300_000) + evaluated_column(paths, None)
        step_columns = "- | - | - |"  # mappo, happo: no trust-region step
        if any(not np.isnan(row["tr_kl"]) for r in runs for row in r):
            kl = [window_mean(r, "tr_kl", WINDOW) for r in runs]
            largest = np.nanmax([row["tr_kl"] for r in runs for row in r])
            accepted = [window_mean(r, "tr_accept_rate", WINDOW) for r in runs]
            step_columns = f"{np.mean(kl):.4f} | {largest:.4f} | {np.mean(accepted):.2f} |"
        print(
            f"| `{label}` | {len(runs)} | {' | '.join(at_marks)} | {np.mean(final):.2f} ± "
            f"{np.std(final):.2f} [{min(final):.2f}, {max(final):.2f}] |{evaluation} "
            f"{step_columns}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="mpe:simple_spread")
    parser.add_argument("--env-arg", nargs="*", default=[])
    parser.add_argument("--labels", nargs="+", default=["itrpo", "matrpo", "hatrpo", "ipg",
                                                         "mappo", "happo"])  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--timing-iters", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/trust_region"))
    parser.add_argument("--report", action="store_true")
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="e.g. kl_threshold=0.05"
    )
    parser.add_argument("--suffix", default="", help="run folder <label><suffix> (with --set)")
    parser.add_argument(
        "--eval-at", nargs="*", type=int, default=[], metavar="STEPS",
        help="also evaluate with the mean action at these env steps (e.g. 300000)",
    )  # fmt: skip
    args = parser.parse_args()
    handle = make_env(args.env, **parse_assignments(args.env_arg, "--env-arg"))
    root = args.out / args.env.replace(":", "-")
    if args.report:
        report(args.labels, args.seeds, args.steps, root)
        return
    overrides = parse_assignments(args.set, "--set")
    if overrides and not args.suffix:
        parser.error("--set needs --suffix, so its runs get their own folder")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    if args.timing_iters:
        timing(args.labels, handle, args.timing_iters)
        return
    for label in args.labels:
        for seed in args.seeds:
            path = root / f"{label}{args.suffix}" / f"seed{seed}.csv"
            train(label, handle, seed, args.steps, path, overrides, tuple(args.eval_at))
            print(f"{label} seed {seed}: done", flush=True)


if __name__ == "__main__":
    main()
