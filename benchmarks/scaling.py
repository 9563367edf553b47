"""Scaling of `efx_mappo` on mpe:simple_spread: env runners and data-parallel learners.

Prints env steps/s (env steps of an iteration / its wall time, median over iterations)
and the learner's share of an iteration for 1, 2, 4, ... env runners up to
``--max-runners`` (default: the machine's cores minus one), then for 1 vs 2
data-parallel learners (``num_learners`` 1 and 2, same ``train_batch_size``). Variants
train in turns, iteration by iteration, so all see the same machine state.

    python benchmarks/scaling.py --timing-iters 6
    python benchmarks/scaling.py --max-runners 14 --gpu     # 16 cores, 1 GPU learner
"""

from __future__ import annotations

import os
import statistics
import time

import common
import ray

from marllib_ext import algos, make_env


def runner_counts(max_runners: int) -> list[int]:
    counts, n = [], 1
    while n < max_runners:
        counts.append(n)
        n *= 2
    return [*counts, max_runners]


def measure(builders: dict, timing_iters: int) -> dict[str, dict[str, float]]:
    built = {name: build() for name, build in builders.items()}
    rates = {name: [] for name in built}
    learner_share = {name: [] for name in built}
    try:
        for iteration in range(timing_iters + 1):
            for name, algorithm in built.items():
                start = time.perf_counter()
                result = algorithm.train()
                seconds = time.perf_counter() - start
                if iteration > 0:
                    rates[name].append(result["env_runners"]["num_env_steps_sampled"] / seconds)
                    learner_share[name].append(result["timers"]["learner_update_timer"] / seconds)
    finally:
        for algorithm in built.values():
            algorithm.stop()
    return {
        name: {
            "env_steps_per_s": statistics.median(rates[name]),
            "learner_share": statistics.median(learner_share[name]),
        }
        for name in built
    }


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--timing-iters", type=int, default=6)
    parser.add_argument("--max-runners", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--gpu", action="store_true", help="one GPU learner for the runner curve")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cpus = os.cpu_count() or 2
    # Logical CPUs: only one variant samples at a time, but all variants' actors live.
    common.start_ray(num_cpus=max(cpus, args.max_runners + 2) * 4, address="local")
    env = make_env("mpe:simple_spread", N=3, max_cycles=25)
    gpu = {"num_learners": 1, "num_gpus_per_learner": 1} if args.gpu else {}

    def efx(**overrides):
        return lambda: algos.efx_mappo(**overrides).rllib_config(env, seed=args.seed).build_algo()

    runners = measure(
        {
            f"{n} env runners": efx(num_env_runners=n, **gpu)
            for n in runner_counts(args.max_runners)
        },
        args.timing_iters,
    )
    learners = measure(
        {f"{n} learners": efx(num_learners=n) for n in (1, 2)},
        args.timing_iters,
    )
    ray.shutdown()
    base = next(iter(runners.values()))["env_steps_per_s"]
    for name, row in {**runners, **learners}.items():
        print(
            f"efx_mappo, {name}: {row['env_steps_per_s']:.0f} env steps/s "
            f"(x{row['env_steps_per_s'] / base:.2f} of 1 runner), "
            f"learner {100 * row['learner_share']:.0f}% of an iteration"
        )
    common.print_report({**runners, **learners})


if __name__ == "__main__":
    main()
