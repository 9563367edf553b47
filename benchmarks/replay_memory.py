"""Peak resident memory of a team-replay run, read from ``/proc`` every 0.5 s: the
largest process and the whole process tree (the driver, which holds the replay store
when sampling in the driver, and Ray's own processes)::

    python benchmarks/replay_memory.py --algo qmix --env magent:battle_v4 \\
        --env-arg map_size=16 max_cycles=50 --share-policy group --iterations 140

Prints one row per ``--report-every`` iterations (episodes stored, the store's bytes,
the peaks so far) and the final peaks. Linux only.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import common
import ray

from marllib_ext import algos, make_env
from marllib_ext.cli import parse_assignments

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        path = task / "children"
        if path.exists():
            found += [int(c) for c in path.read_text().split()]
    return found


def tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        todo += children(current)
    return pids


class PeakSampler(threading.Thread):
    """Largest single process and whole-tree resident bytes under this process."""

    def __init__(self, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.every_s, self.largest, self.total = every_s, 0, 0
        self.running = True

    def run(self) -> None:
        while self.running:
            sizes = [resident(pid) for pid in tree(os.getpid())]
            self.largest = max(self.largest, max(sizes))
            self.total = max(self.total, sum(sizes))
            time.sleep(self.every_s)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--algo", default="qmix")
    parser.add_argument("--env", default="magent:battle_v4")
    parser.add_argument("--env-arg", nargs="*", default=["map_size=16", "max_cycles=50"])
    parser.add_argument("--share-policy", default="group")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--iterations", type=int, default=140)
    parser.add_argument("--report-every", type=int, default=20)
    args = parser.parse_args()

    sampler = PeakSampler()
    sampler.start()
    common.start_ray(num_cpus=2)
    env = make_env(args.env, **parse_assignments(args.env_arg, "--env-arg"))
    algo = algos.get(args.algo, **parse_assignments(args.set, "--set"))
    algorithm = algo.rllib_config(env, share_policy=args.share_policy, seed=0).build_algo()
    gib = 2**30
    print("| iteration | episodes stored | store (written slots) | largest process | tree |")
    print("|---|---|---|---|---|")
    try:
        for iteration in range(1, args.iterations + 1):
            algorithm.train()
            if iteration % args.report_every == 0 or iteration == args.iterations:
                held, size = len(algorithm.store), algorithm.store.written_bytes
                print(
                    f"| {iteration} | {held} | {size / gib:.2f} GiB | "
                    f"{sampler.largest / gib:.2f} GiB | {sampler.total / gib:.2f} GiB |",
                    flush=True,
                )
    finally:
        algorithm.stop()
        sampler.running = False
        ray.shutdown()
    full = algorithm.store.capacity * size / max(held, 1)
    print(f"buffer_size {algorithm.store.capacity}: {full / gib:.2f} GiB when full")


if __name__ == "__main__":
    main()
