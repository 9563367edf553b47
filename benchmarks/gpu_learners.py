"""Learner updates on one GPU against the CPU, measured in one run::

    python benchmarks/gpu_learners.py --iterations 6

Every case is built twice, ``num_gpus_per_learner`` 0 and 1 (one local learner each),
and the two train in turns, so both see the same machine state. Timed per variant:
``learner_group.update`` (the batch's move to the learner's device, every gradient step
of the call and the metrics it returns), as seconds per call and per gradient step, and
the whole ``train()`` iteration; the first iteration that updates is a warm-up and is
dropped. Cases: ``mappo`` on ``mpe:simple_spread`` at the default batch (4000 rows,
minibatches of 1000, 5 epochs) and at 16000 rows (minibatches of 4000), ``sac_roer`` on
Pendulum-v1 (JS, 32 gradient steps per learner call), ``qmix`` and ``maddpg`` on
``mpe:simple_spread`` (one update per iteration). Needs CUDA.
"""

from __future__ import annotations

import statistics
import time

import common
import ray
import torch

from marllib_ext import algos, make_env

# label -> (algorithm, env, continuous actions, overrides, gradient steps per update call;
# None where the call's minibatch count follows the sampled rows)
CASES = {
    "mappo, 4000 rows": ("mappo", "mpe:simple_spread", False, {}, None),
    "mappo, 16000 rows": (
        "mappo", "mpe:simple_spread", False,
        {"train_batch_size": 16000, "minibatch_size": 4000, "num_env_runners": 4}, None,
    ),
    "sac_roer, JS, K = 32": (
        "sac_roer", "Pendulum-v1", False,
        {"per_type": "JS", "rollout_fragment_length": 32,
         "num_steps_sampled_before_learning_starts": 256}, 32,
    ),
    "qmix": ("qmix", "mpe:simple_spread", False, {"learning_starts": 4}, 1),
    "maddpg": ("maddpg", "mpe:simple_spread", True, {"learning_starts": 4}, 1),
}  # fmt: skip


class UpdateTimer:
    """Wraps ``learner_group.update``: the wall seconds of every call that trained."""

    def __init__(self, learner_group, gpu: bool) -> None:
        self.update, self.gpu, self.seconds = learner_group.update, gpu, []
        learner_group.update = self

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        results = self.update(*args, **kwargs)
        if self.gpu:
            torch.cuda.synchronize()
        self.seconds.append(time.perf_counter() - start)
        return results


def build(name: str, env_name: str, continuous: bool, overrides: dict, gpus: int):
    env = make_env(env_name, continuous_actions=continuous) if ":" in env_name else env_name
    settings = {"num_env_runners": 2, **overrides, "num_gpus_per_learner": gpus}
    return algos.get(name, **settings).rllib_config(env, seed=0).build_algo()


def measure(label: str, iterations: int) -> dict[str, dict[str, float]]:
    name, env_name, continuous, overrides, steps_per_call = CASES[label]
    variants = {"cpu": 0, "gpu": 1}
    built = {v: build(name, env_name, continuous, overrides, g) for v, g in variants.items()}
    timers = {v: UpdateTimer(a.learner_group, v == "gpu") for v, a in built.items()}
    iteration_seconds: dict[str, list[float]] = {v: [] for v in variants}
    try:
        while min(len(seconds) for seconds in iteration_seconds.values()) < iterations:
            for variant, algorithm in built.items():
                calls = len(timers[variant].seconds)
                start = time.perf_counter()
                algorithm.train()
                if calls > 0:  # past the warm-up update
                    iteration_seconds[variant].append(time.perf_counter() - start)
    finally:
        for algorithm in built.values():
            algorithm.stop()
    out = {}
    for variant, timer in timers.items():
        per_call = statistics.median(timer.seconds[1:])
        out[variant] = {
            "update_s": per_call,
            "step_ms": 1000 * per_call / steps_per_call if steps_per_call else float("nan"),
            "iteration_s": statistics.median(iteration_seconds[variant]),
        }
    return out


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--iterations", type=int, default=6, help="timed iterations per variant")
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_learners.py needs CUDA: torch.cuda.is_available() is False")
    print(f"GPU: {torch.cuda.get_device_name(0)}; CPU learner threads: {torch.get_num_threads()}")
    common.start_ray(num_cpus=None, num_gpus=1)
    print(
        "| case | CPU learner: update call (s) | GPU: update call (s) | GPU / CPU "
        "| CPU ms per gradient step | GPU ms per gradient step | iteration GPU / CPU |"
    )
    print("|---|---|---|---|---|---|---|")
    for label in args.cases:
        m = measure(label, args.iterations)
        cpu, gpu = m["cpu"], m["gpu"]
        print(
            f"| {label} | {cpu['update_s']:.3f} | {gpu['update_s']:.3f} "
            f"| {gpu['update_s'] / cpu['update_s']:.2f} | {cpu['step_ms']:.1f} "
            f"| {gpu['step_ms']:.1f} | {gpu['iteration_s'] / cpu['iteration_s']:.2f} |",
            flush=True,
        )
    ray.shutdown()


if __name__ == "__main__":
    main()
