"""`mappo` and `qmix` on SMAX against the heuristic enemy: train at an equal env-step
budget over seeds, then evaluate the win rate of the final checkpoint.

    python benchmarks/smax_learning.py --scenario 3m --labels mappo qmix@pymarl2 \\
        --seeds 0 1 2 --steps 100000 --episodes 32

Each (label, seed) writes ``<out>/<scenario>/<label>/seed<k>.json`` (resumable: a run
with its JSON is read, not rerun): the env steps, wall time, the last training
iteration's episode return, and the evaluated win rate (``evaluate``: sampled actions,
``info["success"]`` of each battle's last step).
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from success_runs import print_table, run_seeds


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
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = run_seeds(
        f"smax:{args.scenario}", args.labels, args.seeds, args.steps, args.episodes, args.out,
        args.num_cpus, args.threads,
    )  # fmt: skip
    print_table(rows)


if __name__ == "__main__":
    main()
