"""The joint-Q family on LBF with EPyMARL's settings: train at an equal env-step budget
over seeds, then evaluate the final checkpoint greedily over 100 episodes, as EPyMARL's
``test_greedy`` does.

    python benchmarks/lbf_learning.py --task Foraging-8x8-2p-2f-coop-v3 \\
        --labels qmix@epymarl vdn@epymarl iql@epymarl --seeds 0 1 2 --steps 2050000

Each (label, seed) writes ``<out>/<task>/<label>/seed<k>.json`` (resumable: a run with
its JSON is read, not rerun): the env steps, wall time, the last iteration's training
return, and the evaluated team return, sampled and greedy. LBF normalizes a fully
foraged episode to 1.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from success_runs import print_returns, run_seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="Foraging-8x8-2p-2f-coop-v3")
    parser.add_argument("--labels", nargs="+", default=["qmix@epymarl", "vdn@epymarl"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=2_050_000)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/lbf_epymarl"))
    parser.add_argument("--num-cpus", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: default)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = run_seeds(
        f"lbf:{args.task}", args.labels, args.seeds, args.steps, args.episodes, args.out,
        args.num_cpus, args.threads,
    )  # fmt: skip
    print_returns(rows)


if __name__ == "__main__":
    main()
