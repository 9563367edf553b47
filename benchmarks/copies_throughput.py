"""Copies of a plain PettingZoo env on the batched rollout against RLlib's per-world
path, in one run: the raw env's speed at the same number of copies, each path's
collection speed (the env runner's ``sample()``) and end-to-end training speed.

The per-world rows are the path these envs took before issue 58 (RLlib's
``MultiAgentEnvRunner`` loop over ``num_envs_per_env_runner`` adapters); the batched
rows step the same adapters as one ``envs.copies.CopiesWorld``. The algorithm keeps
its settings for the env (the README's command: ``mappo`` on ``mpe:simple_spread``).

    python benchmarks/copies_throughput.py --env mpe:simple_spread --iterations 4
"""

from __future__ import annotations

import time
import warnings

import common
import numpy as np
import ray

from marllib_ext import algos, make_env


def raw_env_speed(env_name: str, copies: int, steps: int, seed: int = 0) -> float:
    """Env steps/s of ``copies`` bare PettingZoo envs stepped one after another with
    uniformly random actions (resets included)."""
    handle = make_env(env_name)
    envs = [handle.spec.make(**handle.env_args) for _ in range(copies)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    rng = np.random.default_rng(seed)
    done = 0
    start = time.perf_counter()
    while done < steps:
        for env in envs:
            actions = {a: env.action_space(a).sample() for a in env.agents}
            _, _, terminations, truncations, _ = env.step(actions)
            if all(terminations.get(a) or truncations.get(a) for a in env.agents):
                env.reset(seed=int(rng.integers(1 << 30)))
            done += 1
    return done / (time.perf_counter() - start)


def path_speeds(env_name: str, name: str, iterations: int, per_world: bool):
    """``(collection env steps/s, end-to-end env steps/s, sampling line, copies)``."""
    sampler = "per_world" if per_world else "auto"
    config = algos.get(name).rllib_config(make_env(env_name), seed=0, sampler=sampler)
    algorithm = config.build_algo()
    try:
        runner = algorithm.env_runner
        sampling = runner.sampling
        algorithm.train()  # warm-up
        sampled, sampling_s, start = 0, 0.0, time.perf_counter()
        for _ in range(iterations):
            result = algorithm.train()
            sampled += result["env_runners"]["num_env_steps_sampled"]
            sampling_s += result["timers"]["env_runner_sampling_timer"]
        end_to_end = sampled / (time.perf_counter() - start)
        return sampled / sampling_s, end_to_end, sampling, algorithm.config.num_envs_per_env_runner
    finally:
        algorithm.stop()


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--env", default="mpe:simple_spread")
    parser.add_argument("--algo", default="mappo")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--raw-steps", type=int, default=20_000)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    common.start_ray(num_cpus=2)
    batched = path_speeds(args.env, args.algo, args.iterations, per_world=False)
    per_world = path_speeds(args.env, args.algo, args.iterations, per_world=True)
    copies = batched[3]
    raw = raw_env_speed(args.env, copies, args.raw_steps)
    ray.shutdown()
    print(f"{args.algo} on {args.env}, {copies} copies in the driver's env runner, "
          f"{args.iterations} timed iterations after one warm-up")  # fmt: skip
    print(f"raw env, {copies} copies, random actions: {raw:,.0f} env steps/s")
    print("path                        | collection (share of raw) | end to end")
    for label, (collection, end_to_end, sampling, _) in (
        ("batched (copies)", batched),
        ("RLlib per-world", per_world),
    ):
        print(
            f"{label:27s} | {collection:8,.0f} ({collection / raw:.2f}) | "
            f"{end_to_end:8,.0f} env steps/s   [{sampling}]"
        )
    print(
        f"batched / per-world: collection {batched[0] / per_world[0]:.2f}, "
        f"end to end {batched[1] / per_world[1]:.2f}"
    )


if __name__ == "__main__":
    main()
