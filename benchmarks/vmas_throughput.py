"""VMAS sampling speed: one batched simulator per env runner against raw VMAS at the same
batch size, against RLlib's own vector env (N separate one-world simulators), and
against mpe:simple_spread, all measured in one run.

Sampling only (no learning): a `mappo` env runner in the driver samples with its
policy (forward pass, connectors, episode bookkeeping included); env steps count every
world's step.

    python benchmarks/vmas_throughput.py --task navigation --num-envs 8 40 --steps 20000
"""

from __future__ import annotations

import argparse
import time
import warnings

import ray
import torch

from marllib_ext import algos, make_env
from marllib_ext.envs.vmas import VMAS_TASKS


def raw_vmas_steps_per_second(task: str, num_envs: int, steps: int, seed: int = 0) -> float:
    """VMAS's own batched step with uniformly random continuous actions."""
    import vmas

    args = dict(VMAS_TASKS[task])
    max_steps = args.pop("max_steps")
    env = vmas.make_env(
        task, num_envs=num_envs, device="cpu", continuous_actions=True, max_steps=max_steps,
        seed=seed, dict_spaces=True, clamp_actions=True, terminated_truncated=True, **args,
    )  # fmt: skip
    env.reset()
    generator = torch.Generator().manual_seed(seed)
    calls = max(1, steps // num_envs)
    start = time.perf_counter()
    for _ in range(calls):
        actions = {a.name: torch.rand(num_envs, 2, generator=generator) * 2 - 1 for a in env.agents}
        _, _, terminated, truncated, _ = env.step(actions)
        for index in torch.nonzero(terminated | truncated).flatten().tolist():
            env.reset_at(index)
    return calls * num_envs / (time.perf_counter() - start)


def sampling_steps_per_second(env_name: str, num_envs: int, steps: int, batched: bool) -> float:
    """Env steps/s of one env runner in the driver sampling with a `mappo` policy."""
    source = "vmas" if env_name.startswith("vmas:") else "mpe"
    config = algos.mappo(hyperparam_source=source).rllib_config(
        make_env(env_name), seed=0, num_env_runners=0, num_envs_per_env_runner=num_envs
    )
    if not batched:
        # RLlib's own vector env: num_envs separate one-world simulators, stepped in turn.
        from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

        config.env_runners(env_runner_cls=MultiAgentEnvRunner)
    algorithm = config.build_algo()
    try:
        runner = algorithm.env_runner
        runner.sample(num_timesteps=num_envs * 20, explore=True)  # warm-up
        start = time.perf_counter()
        episodes = runner.sample(num_timesteps=steps, explore=True)
        elapsed = time.perf_counter() - start
        sampled = sum(episode.env_steps() for episode in episodes)
    finally:
        algorithm.stop()
    return sampled / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="navigation")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 40])
    parser.add_argument("--steps", type=int, default=20000)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    rows = []
    for num_envs in args.num_envs:
        raw = raw_vmas_steps_per_second(args.task, num_envs, args.steps)
        ours = sampling_steps_per_second(f"vmas:{args.task}", num_envs, args.steps, True)
        copies = sampling_steps_per_second(f"vmas:{args.task}", num_envs, args.steps, False)
        mpe = sampling_steps_per_second("mpe:simple_spread", num_envs, args.steps, False)
        rows.append((num_envs, raw, ours, copies, mpe))
        print(
            f"num_envs {num_envs:3d}: raw VMAS {raw:8.0f} | batched runner {ours:6.0f} "
            f"({ours / raw:.3f} of raw) | {num_envs} one-world copies {copies:6.0f} "
            f"(batched / copies {ours / copies:.2f}) | mpe:simple_spread {mpe:6.0f} "
            f"(vmas batched / mpe {ours / mpe:.2f})",
            flush=True,
        )
    ray.shutdown()
    print("\n| worlds per runner | raw VMAS steps/s | batched runner | share of raw | "
          "one-world copies | batched / copies | mpe:simple_spread | vmas / mpe |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for num_envs, raw, ours, copies, mpe in rows:
        print(
            f"| {num_envs} | {raw:.0f} | {ours:.0f} | {ours / raw:.3f} | {copies:.0f} | "
            f"{ours / copies:.2f} | {mpe:.0f} | {ours / mpe:.2f} |"
        )


if __name__ == "__main__":
    main()
