"""Every on-policy algorithm on one batched simulator, in one run: end-to-end and
collection env steps per second as shares of `mappo`'s, and how each one's env runner
samples (its `sampling` line: rollout blocks, episode chunks built from arrays, or
RLlib's per-world episodes, with the reason a cheaper path was refused).

Each algorithm trains `--iterations` timed iterations after one warm-up, with
`--num-envs` worlds in one env runner in the driver and `--num-envs * --steps-per-world`
env steps per iteration (`num_epochs` 5 and 4 minibatches where the schedule takes
them; A2C and COMA: one step on the whole batch); the rest of each algorithm's
settings are its own for the env's source.

    python benchmarks/onpolicy_paths.py --env vmas:navigation --num-envs 400 \
        --steps-per-world 100 --iterations 3
"""

from __future__ import annotations

import time
import warnings

import common
import ray

from marllib_ext import algos, make_env
from marllib_ext.errors import ConfigError

# One policy per agent: the heterogeneous-agent algorithms update them one after another.
INDIVIDUAL = ("happo", "hatrpo", "efx_happo", "efx_hatrpo")


def on_policy_algorithms() -> list[str]:
    return [name for name in algos.ALGORITHMS if algos.get(name).spec.schedule is not None]


def settings_for(name: str, batch: int) -> dict:
    """The batch size and SGD passes every algorithm is timed at, where it reads them."""
    wanted = {
        "train_batch_size": batch,
        "minibatch_size": batch // 4,
        "critic_minibatch_size": batch // 4,
        "num_epochs": 5,
    }
    spec = algos.get(name).spec
    ignored = spec.ignored_keys()
    fields = set(spec.settings_class.__dataclass_fields__)
    settings = {k: v for k, v in wanted.items() if k in fields and k not in ignored}
    if name in ("ia2c", "ipg", "maa2c", "vda2c", "coma"):  # one step on the whole batch
        settings.update(minibatch_size=None, num_epochs=1)
    return settings


def time_algorithm(name: str, env_name: str, num_envs: int, steps: int, iterations: int):
    """``((env steps/s end to end, collection env steps/s), sampling line)`` of ``name``,
    or ``(None, reason)``; collection counts the env runner's ``sample()`` calls."""
    source = env_name.split(":")[0]
    try:
        algorithm = (
            algos.get(name, hyperparam_source=source, **settings_for(name, steps))
            .rllib_config(
                make_env(env_name),
                share_policy="individual" if name in INDIVIDUAL else "all",
                seed=0,
                num_env_runners=0,
                num_envs_per_env_runner=num_envs,
            )
            .build_algo()
        )
    except ConfigError as e:
        return None, f"not run: {e}"
    try:
        sampling = getattr(algorithm.env_runner, "sampling", "sampling: (not reported)")
        try:
            algorithm.train()  # warm-up
        except ValueError as e:  # e.g. a safe learner on an env that reports no cost
            return None, f"not run: {str(e).splitlines()[0]}"
        sampled, sampling_s, start = 0, 0.0, time.perf_counter()
        for _ in range(iterations):
            result = algorithm.train()
            sampled += result["env_runners"]["num_env_steps_sampled"]
            sampling_s += result["timers"]["env_runner_sampling_timer"]
        return (sampled / (time.perf_counter() - start), sampled / sampling_s), sampling
    finally:
        algorithm.stop()


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--env", default="vmas:navigation")
    parser.add_argument("--num-envs", type=int, default=400)
    parser.add_argument("--steps-per-world", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--algos", nargs="*", default=None, help="default: every on-policy one")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    common.start_ray(num_cpus=2)
    steps = args.num_envs * args.steps_per_world
    names = args.algos or on_policy_algorithms()
    if "mappo" in names:  # the reference first
        names = ["mappo", *[n for n in names if n != "mappo"]]
    print(f"{args.env}, {args.num_envs} worlds, {steps} env steps per iteration, "
          f"{args.iterations} timed iterations after one warm-up")  # fmt: skip
    print("algorithm      end to end (share of mappo's) | collection (share) | sampling")
    reference = None
    for name in names:
        speeds, sampling = time_algorithm(name, args.env, args.num_envs, steps, args.iterations)
        if speeds is None:
            print(f"{name:14s} {sampling}", flush=True)
            continue
        reference = speeds if name == "mappo" else reference
        shares = [s / r for s, r in zip(speeds, reference, strict=True)] if reference else [0, 0]
        print(
            f"{name:14s} {speeds[0]:7,.0f} env steps/s ({shares[0]:.2f}) | "
            f"{speeds[1]:7,.0f} ({shares[1]:.2f}) | {sampling}",
            flush=True,
        )
    ray.shutdown()


if __name__ == "__main__":
    main()
