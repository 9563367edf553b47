"""Recurrent against feed-forward actors on any env at an equal env-step budget over
seeds: train, then evaluate the final checkpoint (sampled and greedy).

    python benchmarks/recurrent_learning.py --env hanabi:small \\
        --labels mappo mappo+use_rnn=true --seeds 0 1 2 --steps 60000 --episodes 50

Labels as in ``success_runs.parse_label`` (``algo[@source][+key=value...]``). Each
(label, seed) writes ``<out>/<env id>/<label>/seed<k>.json`` (resumable). Prints the
team returns (sampled, greedy, training) and, where the env reports success, the win
rates.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from success_runs import print_returns, print_table, run_seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True)
    parser.add_argument("--labels", nargs="+", default=["mappo", "mappo+use_rnn=true"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/recurrent"))
    parser.add_argument("--num-cpus", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: default)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = run_seeds(
        args.env, args.labels, args.seeds, args.steps, args.episodes, args.out,
        args.num_cpus, args.threads,
    )  # fmt: skip
    print_returns(rows)
    if all(r["win_rate"] is not None for runs in rows.values() for r in runs):
        print_table(rows)


if __name__ == "__main__":
    main()
