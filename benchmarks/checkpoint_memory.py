"""Peak resident memory and seconds of a team-replay run's checkpoint steps with a full
store, the way before (``--old``-style paths, rebuilt here) and now, in one run::

    python benchmarks/checkpoint_memory.py --store-mib 1024

A ``vdn`` algorithm on ``mpe:simple_spread`` gets its store filled with random team
episodes of the env's shapes up to ``--store-mib`` (training would only take longer to
reach the same bytes). Each step's peak is the process's ``VmHWM`` after the step minus
its resident memory before (the peak is reset through ``/proc/self/clear_refs``), so a
row reads "how many stores' worth of memory the step adds on top of what the run
holds". Linux only.

- full save: ``save_to_path`` of the whole algorithm (the final checkpoint);
- snapshot save: ``save_policy_snapshot`` (the best evaluation's checkpoint, videos');
- re-evaluation restore, before: ``restore_from_path`` of the full checkpoint into the
  algorithm that holds its store (what the best policy's re-evaluation did);
- re-evaluation restore, now: the same inside ``without_replay``;
- evaluate restore, before: ``Algorithm.from_checkpoint`` then a second algorithm
  restored from the same path (what ``evaluate`` did), the trained one stopped;
- evaluate restore, now: ``restored_algorithm`` (one build, the store not read).
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time
from pathlib import Path

import common
import numpy as np
import ray

from marllib_ext import algos, make_env
from marllib_ext.algos.restore import checkpoint_algorithm, restored_algorithm
from marllib_ext.replay.team_episodes import TeamEpisode
from marllib_ext.rllib_compat.checkpoints import save_policy_snapshot, without_replay

MIB = 2**20


def status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def measured(step):
    """(peak MiB above the resident memory before, seconds) of ``step()``."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = status_mib("VmRSS")
    start = time.perf_counter()
    step()
    seconds = time.perf_counter() - start
    return status_mib("VmHWM") - before, seconds


def build(buffer_size: int):
    env = make_env("mpe:simple_spread")
    config = algos.get("vdn", buffer_size=buffer_size).rllib_config(env, seed=0)
    algorithm = config.build_algo()
    algorithm.train()  # real episodes: the store's shapes
    return algorithm


def fill_store(algorithm, store_mib: float, seed: int = 0) -> None:
    """Adds random episodes of the stored episodes' shapes until the store holds
    ``store_mib`` (or is full)."""
    rng = np.random.default_rng(seed)
    arrays, length = algorithm.store.arrays, int(algorithm.store.lengths[0])
    pool = [
        TeamEpisode(
            obs=rng.standard_normal((length + 1, *arrays["obs"].shape[2:]), dtype=np.float32),
            state=rng.standard_normal((length + 1, arrays["state"].shape[2]), dtype=np.float32),
            actions=rng.integers(0, 5, (length, arrays["obs"].shape[2])),
            rewards=rng.standard_normal((length, arrays["obs"].shape[2]), dtype=np.float32),
            terminated=False,
        )
        for _ in range(16)
    ]
    while algorithm.store.written_bytes < store_mib * MIB and len(algorithm.store) < (
        algorithm.store.capacity
    ):
        algorithm.store.add(pool[len(algorithm.store) % len(pool)])


def directory_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / MIB


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--store-mib", type=float, default=1024)
    args = parser.parse_args()
    common.start_ray(num_cpus=1)
    work = Path(tempfile.mkdtemp(prefix="checkpoint_memory_"))
    rows = []
    try:
        probe = build(buffer_size=1000)
        per_episode = probe.store.written_bytes / probe.store.slots_written
        probe.stop()
        algorithm = build(buffer_size=int(np.ceil(args.store_mib * MIB / per_episode)))
        fill_store(algorithm, args.store_mib)
        store = algorithm.store.written_bytes / MIB
        print(f"store: {len(algorithm.store)} episodes, {store:.0f} MiB", flush=True)
        full, snapshot = work / "full", work / "snapshot"

        def add(name, step):
            peak, seconds = measured(step)
            rows.append((name, peak, seconds))
            print(
                f"{name}: +{peak:.0f} MiB ({peak / store:.2f} stores), {seconds:.1f} s", flush=True
            )

        add("full save", lambda: algorithm.save_to_path(str(full)))
        add("snapshot save", lambda: save_policy_snapshot(algorithm, snapshot))
        add("re-evaluation restore, before", lambda: algorithm.restore_from_path(str(full)))

        def restore_now():
            with without_replay(algorithm):
                algorithm.restore_from_path(str(full))

        add("re-evaluation restore, now", restore_now)
        algorithm.stop()
        algorithm.store = None  # the trained run's store released, as after fit

        def evaluate_before():
            from ray.rllib.algorithms.algorithm import Algorithm

            trained = Algorithm.from_checkpoint(str(full))
            trained.stop()
            del trained
            algorithm_class, config = checkpoint_algorithm(full)
            played = algorithm_class(config)
            played.restore_from_path(str(full))
            played.stop()

        def evaluate_now():
            with restored_algorithm(full):
                pass

        add("evaluate restore, before", evaluate_before)
        add("evaluate restore, now", evaluate_now)
        sizes = {"full": directory_mib(full), "snapshot": directory_mib(snapshot)}
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\nstore {store:.0f} MiB; checkpoint sizes: full {sizes['full']:.0f} MiB, "
        f"snapshot {sizes['snapshot']:.1f} MiB (pid {os.getpid()})"
    )
    print("\n| step | peak above resident, MiB | in stores | seconds |")
    print("|---|---|---|---|")
    for name, peak, seconds in rows:
        print(f"| {name} | {peak:.0f} | {peak / store:.2f} | {seconds:.1f} |")
    by_name = {name: (peak, seconds) for name, peak, seconds in rows}
    for what in ("re-evaluation restore", "evaluate restore"):
        before, now = by_name[f"{what}, before"], by_name[f"{what}, now"]
        print(
            f"{what}: peak now / before {now[0] / before[0]:.3f}, "
            f"seconds now / before {now[1] / before[1]:.3f}"
        )


if __name__ == "__main__":
    main()
