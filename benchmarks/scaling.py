"""Env steps per second of `efx_mappo` on mpe:simple_spread with 1 and 2 env runners.

Interleaved iteration by iteration in one run; env steps/s = env steps sampled in an
iteration / that iteration's wall time (sampling + learning), median over iterations.

    python benchmarks/scaling.py --timing-iters 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import ray

from marllib_ext import algos, make_env


def throughput(timing_iters: int, seed: int) -> dict[str, float]:
    env = make_env("mpe:simple_spread", N=3, max_cycles=25)
    algorithms = {
        n: algos.efx_mappo(num_env_runners=n).rllib_config(env, seed=seed).build_algo()
        for n in (1, 2)
    }
    rates: dict[int, list[float]] = {n: [] for n in algorithms}
    try:
        for iteration in range(timing_iters + 1):
            for n, algorithm in algorithms.items():
                start = time.perf_counter()
                result = algorithm.train()
                seconds = time.perf_counter() - start
                if iteration > 0:
                    rates[n].append(result["env_runners"]["num_env_steps_sampled"] / seconds)
    finally:
        for algorithm in algorithms.values():
            algorithm.stop()
    return {f"{n}_env_runners": statistics.median(values) for n, values in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timing-iters", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # Logical CPUs: 1 + 2 env-runner actors are alive at once, but only one algorithm
    # samples at a time; the 2-runner one then really uses both cores.
    ray.init(num_cpus=4, include_dashboard=False, configure_logging=False, log_to_driver=False)
    rates = throughput(args.timing_iters, args.seed)
    ray.shutdown()
    for name, rate in rates.items():
        print(f"efx_mappo, {name.replace('_', ' ')}: {rate:.0f} env steps/s")
    print(f"speed-up 2 vs 1 env runners: {rates['2_env_runners'] / rates['1_env_runners']:.2f}")
    print(json.dumps(rates))


if __name__ == "__main__":
    main()
