"""The joint-Q family on LBF with EPyMARL's settings: train at an equal env-step budget
over seeds, then evaluate the final checkpoint greedily over 100 episodes, as EPyMARL's
``test_greedy`` does.

    python benchmarks/lbf_learning.py --task Foraging-8x8-2p-2f-coop-v3 \\
        --labels qmix@epymarl vdn@epymarl iql@epymarl --seeds 0 1 2 --steps 2050000 \\
        --eval-every 125

Each (label, seed) writes ``<out>/<task>/<label>/seed<k>.json`` (resumable: a run with
its JSON is read, not rerun): the env steps, wall time, the last iteration's training
return, and the evaluated team return, sampled and greedy. LBF normalizes a fully
foraged episode to 1.

``--eval-every N`` also evaluates greedily during training (``--eval-episodes``
episodes every N iterations) and prints EPyMARL's two summaries: on its test grid
(every 50k env steps, ``gymma.yaml``'s ``test_interval``), the maximum over the grid of
the mean over seeds (the paper's "maximum returns") and its average over the grid.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
from success_runs import evaluation_settings, print_returns, run_seeds

from marllib_ext.ops.statistics import evaluations_at, maximum_and_average_return

EPYMARL_TEST_INTERVAL = 50_000  # uoe-agents/epymarl src/config/envs/gymma.yaml


def print_epymarl_summaries(rows: dict[str, list[dict]], budget: int, interval: int) -> None:
    print("\n| label | seeds | maximum return (best grid point) | average return | final greedy |")
    print("|---|---|---|---|---|")
    curves = {}
    for label, runs in rows.items():
        if not all(run.get("evaluations") for run in runs):
            continue
        at_grid = evaluations_at(
            [np.array([e[0] for e in run["evaluations"]]) for run in runs],
            [np.array([e[1] for e in run["evaluations"]]) for run in runs],
            interval,
            budget,
        )
        best, average = maximum_and_average_return(at_grid)
        means = at_grid.mean(axis=1)  # NaN where a seed has no evaluation yet
        at = (int(np.nanargmax(means)) + 1) * interval
        final = [run["greedy_team_return"] for run in runs]
        print(
            f"| `{label}` | {len(runs)} | {best:.2f} (at {at // 1000}k) | {average:.2f} | "
            f"{np.mean(final):.2f} [{min(final):.2f}, {max(final):.2f}] |"
        )
        curves[label] = at_grid
    if curves:  # the greedy evaluations on the grid, every 5th point: mean [min, max]
        points = range(4, len(next(iter(curves.values()))), 5)
        heads = " | ".join(f"{(g + 1) * interval // 1000}k" for g in points)
        print(f"\n| label | {heads} |\n|---|" + "---|" * len(points))
        for label, at_grid in curves.items():
            cells = " | ".join(
                f"{np.mean(at_grid[g]):.2f} [{np.min(at_grid[g]):.2f}, {np.max(at_grid[g]):.2f}]"
                for g in points
            )
            print(f"| `{label}` | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="Foraging-8x8-2p-2f-coop-v3")
    parser.add_argument("--labels", nargs="+", default=["qmix@epymarl", "vdn@epymarl"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=2_050_000)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=None, help="iterations")
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--test-interval", type=int, default=EPYMARL_TEST_INTERVAL)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/lbf_epymarl"))
    parser.add_argument("--num-cpus", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: default)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    settings = evaluation_settings(args.eval_every, args.eval_episodes)
    rows = run_seeds(
        f"lbf:{args.task}", args.labels, args.seeds, args.steps, args.episodes, args.out,
        args.num_cpus, args.threads, **settings,
    )  # fmt: skip
    print_returns(rows)
    print_epymarl_summaries(rows, args.steps, args.test_interval)


if __name__ == "__main__":
    main()
