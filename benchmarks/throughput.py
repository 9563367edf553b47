"""Where an env runner's time goes on mpe:simple_spread, against the env's own speed.

For `mappo` and `efx_mappo` (interleaved iteration by iteration in one run) prints the
sampling time per iteration split into: env stepping (the raw mpe2 env's own time for
those steps, measured in this process), our adapter (global state, team cost: the
adapter's measured cost per step), the env-to-module and module-to-env connectors (ours,
EFX's budget connector, separately), module inference, the rest (RLlib's episode
bookkeeping), and the learner update; then sampling env steps/s as a fraction of the
raw env's steps/s. ``--settings`` compares RLlib sampling settings for the same
learning (same batch, same updates).

    python benchmarks/throughput.py --timing-iters 5
    python benchmarks/throughput.py --settings --timing-iters 4
"""

from __future__ import annotations

import statistics
import time

import common
import numpy as np
import ray
from mpe2 import simple_spread_v3

from marllib_ext import algos, make_env

OUR_CONNECTORS = ("budget_observation_connector",)


def raw_env_steps_per_second(steps: int = 6000, seed: int = 0) -> float:
    """mpe2's parallel simple_spread (N=3, 25 cycles) with random actions."""
    env = simple_spread_v3.parallel_env(N=3, max_cycles=25)
    env.reset(seed=seed)
    spaces = {a: env.action_space(a) for a in env.possible_agents}
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for _ in range(steps):
        actions = {a: int(rng.integers(spaces[a].n)) for a in env.agents}
        _, _, terms, truncs, _ = env.step(actions)
        if all(terms.values()) or all(truncs.values()):
            env.reset()
    return steps / (time.perf_counter() - start)


def adapter_env_steps_per_second(steps: int = 6000, seed: int = 0) -> float:
    """The same env through our RLlib-facing adapter (global state, team cost)."""
    env = make_env("mpe:simple_spread", N=3, max_cycles=25).make_rllib_env()
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for _ in range(steps):
        actions = {a: int(rng.integers(env.get_action_space(a).n)) for a in env.agents}
        _, _, terms, truncs, _ = env.step(actions)
        if terms["__all__"] or truncs["__all__"]:
            env.reset()
    return steps / (time.perf_counter() - start)


def split(result: dict, num_envs: int, raw_rate: float, adapter_rate: float) -> dict:
    """Seconds of one iteration per part (RLlib's per-call timers x calls)."""
    runners = result["env_runners"]
    steps = runners["num_env_steps_sampled"]
    calls = steps / num_envs  # one vectorized step (and one connector pass) per call
    to_module = runners["env_to_module_connector"]
    ours = sum(
        to_module.get("timers", {}).get("connectors", {}).get(name, 0.0) for name in OUR_CONNECTORS
    )
    sampling = result["timers"]["env_runner_sampling_timer"]
    env_step = runners["env_step_timer"] * calls
    parts = {
        "env stepping (raw env)": steps / raw_rate,
        "our adapter": steps * (1 / adapter_rate - 1 / raw_rate),
        "env stepping, RLlib's vector env": env_step - steps / adapter_rate,
        "env-to-module, RLlib": (to_module["connector_pipeline_timer"] - ours) * calls,
        "env-to-module, ours (EFX budget)": ours * calls,
        "module inference": runners["rlmodule_inference_timer"] * calls,
        "module-to-env": runners["module_to_env_connector"]["connector_pipeline_timer"] * calls,
    }
    parts["rest (episode bookkeeping)"] = sampling - sum(parts.values())
    parts["sampling total"] = sampling
    parts["learner update"] = result["timers"]["learner_update_timer"]
    parts["env steps"] = steps
    return parts


def measure(variants: dict, timing_iters: int) -> dict[str, dict]:
    """Median of each part over ``timing_iters`` interleaved iterations (after warm-up)."""
    raw_rate = statistics.median(raw_env_steps_per_second() for _ in range(3))
    adapter_rate = statistics.median(adapter_env_steps_per_second() for _ in range(3))
    built = {name: (build(), num_envs) for name, (build, num_envs) in variants.items()}
    samples = {name: [] for name in built}
    try:
        for iteration in range(timing_iters + 1):
            for name, (algorithm, num_envs) in built.items():
                result = algorithm.train()
                if iteration > 0:
                    samples[name].append(split(result, num_envs, raw_rate, adapter_rate))
    finally:
        for algorithm, _ in built.values():
            algorithm.stop()
    report = {}
    for name, rows in samples.items():
        medians = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        rate = medians["env steps"] / medians["sampling total"]
        medians["sampling env steps/s"] = rate
        medians["raw env steps/s"] = raw_rate
        medians["adapter env steps/s"] = adapter_rate
        medians["fraction of raw env speed"] = rate / raw_rate
        report[name] = medians
    return report


def print_report(report: dict[str, dict]) -> None:
    names = list(report)
    keys = [k for k in report[names[0]] if k != "env steps"]
    print(f"{'seconds per iteration':36s}" + "".join(f"{n:>22s}" for n in names))
    for key in keys:
        cells = "".join(f"{report[n][key]:22.3f}" for n in names)
        print(f"{key:36s}{cells}")


def default_variants(env) -> dict:
    return {
        name: (lambda n=name: algos.get(n).rllib_config(env, seed=0).build_algo(), 8)
        for name in ("mappo", "efx_mappo")
    }


def settings_variants(env) -> dict:
    """Sampling settings of the same learning problem (4000-step batches)."""
    variants = {}
    for runners in (0, 1):
        for num_envs in (8, 32):
            name = f"mappo r{runners} e{num_envs}"
            variants[name] = (
                lambda r=runners, e=num_envs: (
                    algos.mappo(num_env_runners=r, num_envs_per_env_runner=e)
                    .rllib_config(env, seed=0)
                    .build_algo()
                ),
                num_envs,
            )
    return variants


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--timing-iters", type=int, default=5)
    parser.add_argument("--settings", action="store_true", help="compare sampling settings")
    args = parser.parse_args()
    common.start_ray(num_cpus=2, address="local")
    env = make_env("mpe:simple_spread", N=3, max_cycles=25)
    variants = settings_variants(env) if args.settings else default_variants(env)
    report = measure(variants, args.timing_iters)
    ray.shutdown()
    print_report(report)
    common.print_report(report)


if __name__ == "__main__":
    main()
