"""ROER benchmark: uniform vs PER vs ROER-KL vs ROER-JS replay for SAC on Pendulum-v1.

Every run uses the same SAC settings and env-step budget; only ``per_type`` differs.
The final return is the mean episode return over the last --tail iterations' completed
episodes (RLlib's smoothed ``episode_return_mean``). With --isac-steps > 0 it also
trains ``isac_roer`` (JS) on continuous simple_spread and compares it with a random
team. Writes ``<out>/<per_type>/seed<k>.csv``.

    python benchmarks/roer_pendulum.py --seeds 0 1 2 --steps 6000 --isac-steps 6000
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
import ray

from marllib_ext import algos, make_env

PER_TYPES = ("uniform", "PER", "KL", "JS")


def run(algo, env, seed: int, steps: int, path: Path) -> tuple[float, float]:
    algorithm = algo.rllib_config(env, seed=seed).build_algo()
    path.parent.mkdir(parents=True, exist_ok=True)
    returns, start = [], time.perf_counter()
    try:
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["env_steps", "episode_return_mean"])
            while True:
                result = algorithm.train()
                value = result["env_runners"].get("episode_return_mean", float("nan"))
                steps_done = result["num_env_steps_sampled_lifetime"]
                writer.writerow([steps_done, value])
                f.flush()
                returns.append(value)
                if steps_done >= steps:
                    break
    finally:
        algorithm.stop()
    return float(returns[-1]), time.perf_counter() - start


def random_team_return(episodes: int = 50) -> float:
    """Mean team episode return of uniformly random continuous actions."""
    from marllib_ext.envs import make_parallel_env

    env = make_parallel_env("mpe:simple_spread", continuous_actions=True)
    totals = []
    for episode in range(episodes):
        env.reset(seed=episode)
        total = 0.0
        while env.agents:
            actions = {a: env.action_space(a).sample() for a in env.agents}
            _, rewards, _, _, _ = env.step(actions)
            total += sum(rewards.values())
        totals.append(total)
    return float(np.mean(totals))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--per-types", nargs="+", default=list(PER_TYPES))
    parser.add_argument("--hiddens", type=int, nargs="+", default=[64, 64])
    parser.add_argument(
        "--fragment", type=int, default=4, help="env steps sampled per gradient update"
    )
    parser.add_argument("--isac-steps", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/roer_pendulum"))
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    common = {
        "hiddens": args.hiddens,
        "num_steps_sampled_before_learning_starts": 500,
        "rollout_fragment_length": args.fragment,
    }

    table = {}
    for per_type in args.per_types:
        finals = []
        for seed in args.seeds:
            final, seconds = run(
                algos.sac_roer(per_type=per_type, **common),
                "Pendulum-v1",
                seed,
                args.steps,
                args.out / per_type / f"seed{seed}.csv",
            )
            finals.append(final)
            print(f"{per_type:<8} seed {seed}: return {final:9.1f}  ({seconds:.0f} s)", flush=True)
        table[per_type] = finals
    print(
        f"\nPendulum-v1, SAC, {args.steps} env steps, one update per {args.fragment} env "
        f"steps, hiddens {args.hiddens}"
    )
    print(f"{'per_type':<8} {'final return (mean)':>20}  per seed")
    for per_type, finals in table.items():
        print(f"{per_type:<8} {np.mean(finals):20.1f}  {[round(v, 1) for v in finals]}")

    if args.isac_steps > 0:
        env = make_env("mpe:simple_spread", continuous_actions=True)
        final, seconds = run(
            algos.isac_roer(per_type="JS", **common),
            env,
            args.seeds[0],
            args.isac_steps,
            args.out / "isac_roer_spread" / f"seed{args.seeds[0]}.csv",
        )
        random_return = random_team_return()
        print(
            f"\nisac_roer (JS) on continuous simple_spread, {args.isac_steps} env steps: "
            f"team return {final:.1f} vs random team {random_return:.1f} ({seconds:.0f} s)"
        )
        table["isac_roer_spread"] = {"final": final, "random": random_return}
    ray.shutdown()
    print(json.dumps(table))


if __name__ == "__main__":
    main()
