"""Wall time of a `qmix` run against a `mappo` run at equal env steps on SMAX, and where
`qmix`'s time goes, measured in one invocation:

    python benchmarks/qmix_speed.py --scenario 3m --steps 50000

Rows: `mappo` (the `smax` source), `qmix` with the `pymarl2` source (GRU agents,
TD(lambda), 128-episode batches, one update per 8 episodes), and the same `qmix`
sampling only (its env runner's `sample()` for the same env steps, no update): the
difference between the last two is the learner's share. Every run is built, trained
and stopped in this process on one torch thread.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import ray
import torch

from marllib_ext import algos, make_env


def run_seconds(name: str, source: str, env_name: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        algos.get(name, source).fit(
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="3m")
    parser.add_argument("--steps", type=int, default=50_000)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    env = f"smax:{args.scenario}"
    try:
        mappo = run_seconds("mappo", "smax", env, args.steps)
        qmix = run_seconds("qmix", "pymarl2", env, args.steps)
        sampling = sampling_seconds("qmix", "pymarl2", env, args.steps)
    finally:
        ray.shutdown()
    print(f"\n{env}, {args.steps} env steps per row, one run each")
    print("| run | wall s | / mappo |")
    print("|---|---|---|")
    print(f"| `mappo` (smax source) | {mappo:.0f} | 1.00 |")
    print(f"| `qmix` (pymarl2 source) | {qmix:.0f} | {qmix / mappo:.2f} |")
    print(f"| `qmix` sampling only | {sampling:.0f} | {sampling / mappo:.2f} |")


if __name__ == "__main__":
    main()
