"""MAPPO and IPPO on mpe:simple_spread (N=3, 25 cycles) at a fixed env-step budget.

Prints, all measured in this one run:
  * per-agent mean episode return of a uniformly random policy and of the scripted
    "agent i goes to landmark i" policy (mpe2 directly, no RLlib);
  * per-agent mean return of `mappo` and `ippo` (shared policy) after --steps env steps;
  * seconds per training iteration of `mappo`, `ippo` and plain RLlib multi-agent PPO
    with a shared policy (RLlib's own ParallelPettingZooEnv, same batch settings),
    interleaved iteration by iteration, and the ratios to plain PPO.

    python benchmarks/mappo_spread.py --steps 200000 --timing-iters 8
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
from ray.tune.registry import register_env
from timing import interleaved_seconds_per_iteration

from marllib_ext import algos, make_env
from marllib_ext.algos.ppo.builders import actor_model_config

N, CYCLES = 3, 25
ENV = make_env("mpe:simple_spread", N=N, max_cycles=CYCLES)


def _raw_env():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=N, max_cycles=CYCLES, continuous_actions=False)


def scripted_action(obs: np.ndarray, index: int) -> int:
    """Move along the larger axis of landmark ``index``'s relative position."""
    rel = obs[4 + 2 * index : 6 + 2 * index]
    if abs(rel[0]) > abs(rel[1]):
        return 2 if rel[0] > 0 else 1
    return 4 if rel[1] > 0 else 3


def baseline_return(policy: str, episodes: int, seed: int) -> float:
    env = _raw_env()
    rng = np.random.default_rng(seed)
    totals = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        returns = dict.fromkeys(env.possible_agents, 0.0)
        while env.agents:
            if policy == "random":
                actions = {a: int(rng.integers(5)) for a in env.agents}
            else:
                actions = {a: scripted_action(obs[a], i) for i, a in enumerate(env.agents)}
            obs, rewards, *_ = env.step(actions)
            for agent, reward in rewards.items():
                returns[agent] += reward
        totals.append(np.mean(list(returns.values())))
    return float(np.mean(totals))


def plain_ppo_config(settings) -> PPOConfig:
    register_env("plain_spread", lambda cfg: ParallelPettingZooEnv(_raw_env()))
    return (
        PPOConfig()
        .environment("plain_spread")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=settings.num_envs_per_env_runner)
        .training(
            train_batch_size_per_learner=settings.train_batch_size,
            minibatch_size=settings.minibatch_size,
            num_epochs=settings.num_epochs,
            lr=settings.lr,
        )
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda aid, ep, **kw: "shared")
        # Same actor network as ours (RLlib's default is 256x256), so only the
        # pipelines differ.
        .rl_module(model_config=actor_model_config(settings))
    )


def timing(timing_iters: int, seed: int) -> dict[str, float]:
    settings = algos.mappo().settings(ENV)
    return interleaved_seconds_per_iteration(
        {
            "plain_ppo": lambda: plain_ppo_config(settings).build_algo(),
            "mappo": lambda: algos.mappo().rllib_config(ENV, seed=seed).build_algo(),
            "ippo": lambda: algos.ippo().rllib_config(ENV, seed=seed).build_algo(),
        },
        timing_iters,
    )


def learning(name: str, steps: int, seed: int) -> dict[str, float]:
    result = algos.get(name).fit(
        ENV,
        stop={"timesteps_total": steps},
        seed=seed,
        local_dir="runs/benchmarks",
        checkpoint_end=False,
        on_iteration=lambda row: print(
            f"  {name} iter {row['training_iteration']:3d} steps {row['timesteps_total']:7d}"
            f" agent return {row['agent_return_mean']:7.2f}",
            flush=True,
        ),
    )
    final = result.final
    return {
        "env_steps": final["timesteps_total"],
        "agent_return_mean": final["agent_return_mean"],
        "wall_s": final["time_total_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000, help="env steps per algorithm")
    parser.add_argument("--timing-iters", type=int, default=8)
    parser.add_argument("--baseline-episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-learning", action="store_true")
    args = parser.parse_args()

    # Logical CPUs: the three interleaved algorithms each hold an env-runner actor but
    # only one of them runs at a time on this 2-core machine.
    ray.init(num_cpus=4, include_dashboard=False, configure_logging=False, log_to_driver=False)
    report: dict[str, object] = {
        "random_agent_return": baseline_return("random", args.baseline_episodes, args.seed),
        "scripted_agent_return": baseline_return("scripted", args.baseline_episodes, args.seed),
    }
    print(f"random   per-agent return {report['random_agent_return']:.2f}")
    print(f"scripted per-agent return {report['scripted_agent_return']:.2f}")

    seconds = timing(args.timing_iters, args.seed)
    report["seconds_per_iteration"] = seconds
    report["mappo_over_plain_ppo"] = seconds["mappo"] / seconds["plain_ppo"]
    report["ippo_over_plain_ppo"] = seconds["ippo"] / seconds["plain_ppo"]
    for name, value in seconds.items():
        print(f"{name:<10} {value:.2f} s/iteration (median of {args.timing_iters})")
    print(f"mappo / plain PPO iteration time: {report['mappo_over_plain_ppo']:.3f}")
    print(f"ippo  / plain PPO iteration time: {report['ippo_over_plain_ppo']:.3f}")

    if not args.skip_learning:
        for name in ("mappo", "ippo"):
            report[name] = learning(name, args.steps, args.seed)
        print(f"\n{'algorithm':<10} {'env steps':>10} {'per-agent return':>17}")
        print(f"{'random':<10} {'-':>10} {report['random_agent_return']:17.2f}")
        print(f"{'scripted':<10} {'-':>10} {report['scripted_agent_return']:17.2f}")
        for name in ("mappo", "ippo"):
            row = report[name]
            print(f"{name:<10} {row['env_steps']:10d} {row['agent_return_mean']:17.2f}")
    print(json.dumps(report, indent=1, default=float))
    ray.shutdown()


if __name__ == "__main__":
    main()
