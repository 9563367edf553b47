"""Every on-policy algorithm of the registry on mpe:simple_spread: per-agent return at an
equal env-step budget over seeds, and iteration time relative to ``mappo``.

Learning (resumable: a finished ``<out>/<algo>_seed<k>.csv`` is read, not rerun)::

    python benchmarks/onpolicy_table.py --steps 200000 --seeds 0 1 2
    python benchmarks/onpolicy_table.py --algos ia2c maa2c coma happo --steps 60000 --seeds 0

Table of the runs finished so far (reads the CSVs, trains nothing)::

    python benchmarks/onpolicy_table.py --report --out benchmarks/results/onpolicy_table_200k

``benchmarks/results/onpolicy_table_200k`` keeps the CSVs of the table's runs; runs whose
CSVs were lost are in its ``earlier_runs.csv`` (values transcribed from the table they
made), which ``--report`` reads too.

Timing (all algorithms built at once, trained in turns, in one run)::

    python benchmarks/onpolicy_table.py --timing-iters 3 --skip-learning

``happo`` / ``efx_happo`` / ``hatrpo`` use ``share_policy=individual`` (they update
policies in turn); every other algorithm shares one policy (``all``). The uniformly random team
gets -26.4 per agent (2000 episodes). Each CSV also holds the algorithm's own progress
columns (safe: team episode cost and multiplier; EFX: budget z).
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np
import ray
from run_csv import earlier_runs, finished_run, mean_at, window_mean
from timing import interleaved_seconds_per_iteration

from marllib_ext import algos, make_env
from marllib_ext.cli import parse_assignments
from marllib_ext.postprocessing.efx_advantage import BINDING_FRACTION

RANDOM_PER_AGENT = -26.4  # 2000 uniformly random episodes
WINDOW = 3  # iterations averaged for the final return


# Not in this 200k table: the trust-region family and ipg have their own simple_spread
# table at 300k beside mappo and happo (benchmarks/trust_region.py, 3 seeds), and
# efx_hatrpo has no learning benchmark yet; every other on-policy algorithm must have
# its rows here.
NOT_IN_THIS_TABLE = ("itrpo", "matrpo", "hatrpo", "efx_hatrpo", "ipg")


def on_policy_algorithms() -> list[str]:
    return [
        name
        for name in algos.algorithms_that(off_policy=False, single_agent_only=False)
        if name not in NOT_IN_THIS_TABLE
    ]


def share_policy(name: str) -> str:
    return "individual" if algos.ALGORITHMS[name].capabilities.sequential else "all"


def per_agent_return(result: dict) -> float:
    returns = result.get("env_runners", {}).get("agent_episode_returns_mean") or {}
    return float(np.mean(list(returns.values()))) if returns else math.nan


def binding_fraction(result: dict) -> float:
    """Fraction of valid rows where EFX's conservative term set the advantage, averaged
    over the modules (critics) that logged it this iteration."""
    values = [
        float(stats[BINDING_FRACTION])
        for stats in result.get("learners", {}).values()
        if isinstance(stats, dict) and BINDING_FRACTION in stats
    ]
    return float(np.mean(values)) if values else math.nan


def learn(
    name: str, seed: int, steps: int, out: Path, overrides: dict | None = None, sampling="default"
) -> list[dict]:
    path = out / f"{name}_seed{seed}.csv"
    if (rows := finished_run(path, steps)) is not None:
        return rows
    env = make_env("mpe:simple_spread")
    algorithm = algos.get(name, **(overrides or {})).rllib_config(
        env, share_policy=share_policy(name), seed=seed
    )
    algorithm = algorithm.build_algo()
    runner = algorithm.env_runner
    if sampling == "chunks":  # episode chunks built from the same arrays
        runner.array_rollout.blocks_refusal = "benchmark"
    elif sampling == "per_world":  # RLlib's per-world episodes, as before issue 58
        runner.array_rollout, runner.array_rollout_refusal = None, "benchmark"
    # The algorithm's own columns too (safe: team episode cost and multiplier; EFX: z).
    spec = algos.get_algo_spec(name)
    fields = ["timesteps_total", "time_total_s", "per_agent_return"]
    fields += [column.name for column in spec.progress_columns]
    if spec.capabilities.has_budget:
        fields.append(BINDING_FRACTION)
    rows = []
    try:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            while not rows or rows[-1]["timesteps_total"] < steps:
                result = algorithm.train()
                row = {
                    "timesteps_total": int(
                        result["env_runners"].get("num_env_steps_sampled_lifetime", 0)
                    ),
                    "time_total_s": float(result.get("time_total_s", math.nan)),
                    "per_agent_return": per_agent_return(result),
                    **spec.progress(result),
                }
                if spec.capabilities.has_budget:
                    row[BINDING_FRACTION] = binding_fraction(result)
                writer.writerow(row)
                f.flush()
                rows.append(row)
    finally:
        algorithm.stop()
    return rows


def spread(values: list[float]) -> str:
    return f"{np.mean(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def column_values(
    runs: list[list[dict]], earlier: dict[tuple[str, int], list[float]], column: str, at: int
) -> list[float]:
    """One algorithm's ``column`` at ``at`` env steps: its earlier values (keyed by column
    and env steps), then one per run whose CSV logged the column."""
    logged = [mean_at(rows, at, column, WINDOW) for rows in runs if column in rows[0]]
    return earlier.get((column, at), []) + logged


def report(names: list[str], seeds: list[int], steps: int, out: Path) -> None:
    """One row per algorithm: the finished runs' CSVs for ``seeds`` plus the values in
    ``earlier_runs.csv`` (a seed there is not read from a CSV too)."""
    half = steps // 2
    print(
        f"| algorithm | seeds | at {half:,} env steps | at {steps:,} env steps "
        f"| own columns at {steps:,} (seeds that logged them) |"
    )
    print("|---|---|---|---|---|")
    earlier_seeds, earlier_values = earlier_runs(out)
    for name in names:
        kept = [s for s in seeds if s not in earlier_seeds.get(name, set())]
        runs = [finished_run(out / f"{name}_seed{seed}.csv", steps) for seed in kept]
        runs = [rows for rows in runs if rows is not None]
        earlier = {key[1:]: v for key, v in earlier_values.items() if key[0] == name}
        at_end = column_values(runs, earlier, "per_agent_return", steps)
        if not at_end:
            continue
        at_half = column_values(runs, earlier, "per_agent_return", half)
        own = []
        columns = [c.name for c in algos.get_algo_spec(name).progress_columns]
        for column in [*columns, BINDING_FRACTION]:
            if logged := column_values(runs, earlier, column, steps):
                own.append(f"{column} {spread(logged)} ({len(logged)})")
        print(
            f"| `{name}` | {len(at_end)} | {spread(at_half)} | {spread(at_end)} "
            f"| {'; '.join(own)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=None, help="default: every on-policy")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--timing-iters", type=int, default=0)
    parser.add_argument("--skip-learning", action="store_true")
    parser.add_argument("--report", action="store_true", help="table of finished runs only")
    parser.add_argument("--out", type=Path, default=Path("runs/onpolicy_table"))
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides (own --out)"
    )
    parser.add_argument(
        "--sampling",
        choices=["default", "chunks", "per_world"],
        default="default",
        help="force episode chunks or RLlib's per-world path (own --out)",
    )
    args = parser.parse_args()
    overrides = parse_assignments(args.set, "--set")
    names = args.algos or on_policy_algorithms()
    if args.report:
        report(names, args.seeds, args.steps, args.out)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    if not args.skip_learning:
        print(f"| algorithm | per-agent return at {args.steps:,} env steps, mean [min, max] |")
        print("|---|---|")
        for name in names:
            runs = [
                learn(name, s, args.steps, args.out, overrides, args.sampling) for s in args.seeds
            ]
            finals = [window_mean(rows, "per_agent_return", WINDOW) for rows in runs]
            print(
                f"| `{name}` | {np.mean(finals):.2f} [{min(finals):.2f}, {max(finals):.2f}] "
                f"({len(finals)} seeds; random {RANDOM_PER_AGENT:.2f}) |",
                flush=True,
            )

    if args.timing_iters:
        env = make_env("mpe:simple_spread")
        timed = names if "mappo" in names else ["mappo", *names]
        seconds = interleaved_seconds_per_iteration(
            {
                name: lambda name=name: (
                    algos.get(name, num_env_runners=0)
                    .rllib_config(env, share_policy=share_policy(name), seed=0)
                    .build_algo()
                )
                for name in timed
            },
            args.timing_iters,
        )
        print("| algorithm | s / iteration | ratio to mappo |")
        print("|---|---|---|")
        for name in timed:
            print(f"| `{name}` | {seconds[name]:.2f} | {seconds[name] / seconds['mappo']:.3f} |")


if __name__ == "__main__":
    main()
