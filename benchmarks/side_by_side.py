"""Runs side by side: env steps per second of one `marllib-ext train` run alone and of
two started together, with one torch thread per process (`--threads 1`, the default)
and with torch's default (`--threads 0`), measured in one invocation.

    python benchmarks/side_by_side.py --algo qmix --env smax:3m --source pymarl2 \\
        --steps 20000

Each run is a separate `marllib-ext train` process (its own local Ray); its speed is
its env steps over its training seconds (`time_total_s` of the last progress row, so
start-up and compilation count once, as for any run).
"""

from __future__ import annotations

import csv
import subprocess
import sys
import tempfile
from pathlib import Path

import common


def start(args, threads: int, seed: int, out: Path) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "marllib_ext.cli", "train", args.algo, "--env", args.env,
        "--stop-timesteps", str(args.steps), "--seed", str(seed), "--local-dir", str(out),
        "--threads", str(threads), "--num-cpus", "1",
    ]  # fmt: skip
    if args.source:
        command += ["--hyperparam-source", args.source]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def steps_per_second(out: Path) -> float:
    (progress,) = out.glob("*/progress.csv")
    last = list(csv.DictReader(progress.open()))[-1]
    return float(last["timesteps_total"]) / float(last["time_total_s"])


def measure(args, threads: int, runs: int, root: Path) -> list[float]:
    outs = [root / f"threads{threads}_of{runs}_{k}" for k in range(runs)]
    processes = [start(args, threads, k, out) for k, out in enumerate(outs)]
    for process in processes:
        if process.wait() != 0:
            raise RuntimeError(f"a run failed: {process.args}")
    return [steps_per_second(out) for out in outs]


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--algo", default="qmix")
    parser.add_argument("--env", default="smax:3m")
    parser.add_argument("--source", default="pymarl2")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 0])
    args = parser.parse_args()
    print("| torch threads per run | runs together | env steps/s per run | / alone |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as root:
        for threads in args.threads:
            (alone,) = measure(args, threads, 1, Path(root))
            pair = measure(args, threads, 2, Path(root))
            shown = "torch's default" if threads == 0 else str(threads)
            print(f"| {shown} | 1 | {alone:.0f} | 1.00 |", flush=True)
            print(
                f"| {shown} | 2 | {', '.join(f'{v:.0f}' for v in pair)} | "
                f"{', '.join(f'{v / alone:.2f}' for v in pair)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
