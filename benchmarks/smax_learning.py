"""`mappo` and `qmix` on SMAX against the heuristic enemy: train at an equal env-step
budget over seeds, then evaluate the win rate of the final checkpoint.

    python benchmarks/smax_learning.py --scenario 3m --labels mappo qmix@pymarl2 \\
        --seeds 0 1 2 --steps 100000 --episodes 32

Each (label, seed) writes ``<out>/<scenario>/<label>/seed<k>.json`` (resumable: a run
with its JSON is read, not rerun): the env steps, wall time, the last training
iteration's episode return, and the evaluated win rate (``evaluate``: sampled actions,
``info["success"]`` of each battle's last step).

``--eval-every N`` also evaluates greedily during training (``--eval-episodes``
battles every N iterations); each JSON then holds the curve (``evaluation_win_rates``:
[env steps, win rate]) and the table gains its win rate at a few budgets.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
from success_runs import evaluation_settings, print_table, run_seeds

from marllib_ext.ops.statistics import evaluations_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="3m")
    parser.add_argument("--labels", nargs="+", default=["mappo", "qmix"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/smax"))
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: default)")
    parser.add_argument("--eval-every", type=int, default=None, help="iterations")
    parser.add_argument("--eval-episodes", type=int, default=32)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    settings = evaluation_settings(args.eval_every, args.eval_episodes)
    rows = run_seeds(
        f"smax:{args.scenario}", args.labels, args.seeds, args.steps, args.episodes, args.out,
        args.num_cpus, args.threads, **settings,
    )  # fmt: skip
    print_table(rows)
    print_win_rate_curves(rows, args.steps)


def print_win_rate_curves(rows: dict[str, list[dict]], steps: int, points: int = 5) -> None:
    """The greedy win rate during training at ``points`` even budgets up to ``steps``:
    each seed's latest evaluation at or before the budget (``evaluations_at``), mean
    [min, max] over seeds."""
    curves = {
        label: runs
        for label, runs in rows.items()
        if all(run.get("evaluation_win_rates") for run in runs)
    }
    if not curves:
        return
    interval = steps / points
    print(
        "\n| team | " + " | ".join(f"{interval * (g + 1) / 1e6:.2f}M" for g in range(points)) + " |"
    )
    print("|---|" + "---|" * points)
    for label, runs in curves.items():
        at_grid = evaluations_at(
            [[at for at, _ in run["evaluation_win_rates"]] for run in runs],
            [[rate for _, rate in run["evaluation_win_rates"]] for run in runs],
            interval,
            steps,
        )
        cells = [
            "–" if np.isnan(row).any() else f"{row.mean():.2f} [{row.min():.2f}, {row.max():.2f}]"
            for row in at_grid
        ]
        print(f"| `{label}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
