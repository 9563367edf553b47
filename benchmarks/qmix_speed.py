"""Wall time of a `qmix` run against a `mappo` run at equal env steps on SMAX, and where
`qmix`'s time goes, measured in one invocation:

    python benchmarks/qmix_speed.py --scenario 3m --steps 50000

Rows: `mappo` (the `smax` source), `qmix` with the `pymarl2` source (GRU agents,
TD(lambda), 128-episode batches, one update per 8 episodes), the same `qmix` with
``overlap_sampling`` (one remote env runner samples the next episodes while the learner
updates), and the same `qmix` sampling only (its env runner's `sample()` for the same
env steps, no update): the difference between the second and the last is the learner's
share. ``--segmented-row`` adds `qmix` with ``segmented_unroll`` (its GRU agents unroll
no padded step of a replayed batch). Every run is built, trained and stopped in this
process on one torch thread.

``--learners cpu gpu`` adds the `mappo` and `qmix` rows with the learner on one GPU
(``num_gpus_per_learner=1``, env sampling still on the CPU; set ``JAX_PLATFORMS=cpu``
to keep SMAX's JAX there too), each against the `mappo` run of its own learner device.

``--repeats N`` runs the `mappo` row and the `qmix` rows N times, alternating, and
prints each `qmix` row's ratio to the `mappo` run of its own repeat, then the median
and range of those ratios: one run per row is within the spread between machines.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings

import common
import ray
import torch

from marllib_ext import algos, make_env

OVERLAPPED = {"num_env_runners": 1, "overlap_sampling": True}


def run_seconds(
    name: str, source: str, env_name: str, steps: int, gpus: int = 0, **overrides
) -> float:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        algos.get(name, source, num_gpus_per_learner=gpus, **overrides).fit(
            make_env(env_name), stop={"timesteps_total": steps}, local_dir=out, seed=0
        )
        return time.perf_counter() - start


def sampling_seconds(name: str, source: str, env_name: str, steps: int) -> float:
    algorithm = algos.get(name, source).rllib_config(make_env(env_name), seed=0).build_algo()
    try:
        runner = algorithm.env_runner
        start, sampled = time.perf_counter(), 0
        while sampled < steps:
            sampled += sum(episode.length for episode in runner.sample())
        return time.perf_counter() - start
    finally:
        algorithm.stop()


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--scenario", default="3m")
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--learners", nargs="+", choices=["cpu", "gpu"], default=["cpu"])
    parser.add_argument("--no-sampling-row", action="store_true")
    parser.add_argument(
        "--no-overlap-row", action="store_true", help="leave out `qmix` with overlap_sampling"
    )
    parser.add_argument(
        "--segmented-row",
        action="store_true",
        help="add `qmix` with segmented_unroll (no padded GRU step) on the CPU learner",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run mappo and the qmix rows this many times, alternating; report the spread",
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    gpus = 1 if "gpu" in args.learners else 0
    # The driver and the overlapped run's one remote env runner.
    common.start_ray(num_cpus=2, num_gpus=gpus)
    env = f"smax:{args.scenario}"
    rows, ratios = [], {}
    try:
        for learner in args.learners:
            on_gpu = int(learner == "gpu")
            for repeat in range(args.repeats):
                tag = f", repeat {repeat + 1}" if args.repeats > 1 else ""
                mappo = run_seconds("mappo", "smax", env, args.steps, on_gpu)
                rows.append((f"`mappo` (smax source), {learner} learner{tag}", mappo, mappo))
                for variant, overrides in qmix_variants(
                    learner, args.segmented_row, not args.no_overlap_row
                ):
                    seconds = run_seconds("qmix", "pymarl2", env, args.steps, on_gpu, **overrides)
                    label = f"`qmix` (pymarl2 source){variant}, {learner} learner"
                    rows.append((label + tag, seconds, mappo))
                    ratios.setdefault(label, []).append(seconds / mappo)
                    print(f"{rows[-1][0]}: {seconds:.1f} s, {seconds / mappo:.2f}", flush=True)
        if not args.no_sampling_row:
            sampling = sampling_seconds("qmix", "pymarl2", env, args.steps)
            rows.append(("`qmix` sampling only", sampling, rows[0][1]))
    finally:
        ray.shutdown()
    runs = "one run each" if args.repeats == 1 else f"{args.repeats} runs of each, alternating"
    print(f"\n{env}, {args.steps} env steps per run, {runs}")
    print("| run | wall s | / mappo (same learner device) |")
    print("|---|---|---|")
    for label, seconds, mappo in rows:
        print(f"| {label} | {seconds:.0f} | {seconds / mappo:.2f} |")
    if args.repeats > 1:
        print(f"\n/ mappo over {args.repeats} repeats: median [min, max]")
        for label, values in ratios.items():
            median = statistics.median(values)
            print(f"{label}: {median:.2f} [{min(values):.2f}, {max(values):.2f}]")


def qmix_variants(learner: str, segmented_row: bool, overlap_row: bool) -> list[tuple[str, dict]]:
    """The `qmix` rows of one learner device: overlapped, plain, and (CPU) segmented."""
    variants = [(", overlap_sampling", OVERLAPPED)] if overlap_row else []
    variants.append(("", {}))
    if learner == "cpu" and segmented_row:
        variants.append((", segmented_unroll", {"segmented_unroll": True}))
    return variants


if __name__ == "__main__":
    main()
