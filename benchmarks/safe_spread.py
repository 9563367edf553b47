"""Safe-MARL benchmark: return and collision cost on mpe:simple_spread.

`mappo` runs first on every seed; unless --cost-limit is given, the limit of the
constrained runs is --limit-fraction times mappo's measured mean episode cost, so it is
below mappo's cost by construction. Then `mappo_lag`, `mappo_focops` (and any other
--algorithms) run with that limit, and `efx_mappo` as the exploration reference. Each
run logs the team episode cost (sum over agents and steps of info["cost"]: one per
overlapped agent per step) with the same callback. The final numbers average the last
--tail iterations' completed episodes. Writes ``<out>/<algorithm>/seed<k>.csv``.

    python benchmarks/safe_spread.py --seeds 0 1 2 --steps 60000
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import ray

from marllib_ext import algos, make_env
from marllib_ext.algos.api import with_episode_end_callback
from marllib_ext.algos.safe import COST_EPISODES_DONE, EPISODE_COST_SUM, log_episode_cost

ENV = "mpe:simple_spread"
N_AGENTS = 3
FIELDS = ("timesteps_total", "agent_return_mean", "episode_cost_mean", "cost_multiplier")


def run(
    name: str, seed: int, steps: int, tail: int, out: Path, overrides: dict, per_world=False
) -> dict:
    config = algos.get(name, **overrides).rllib_config(make_env(ENV), seed=seed)
    spec = algos.get_algo_spec(name)
    if name in ("mappo", "efx_mappo", "ippo"):  # unconstrained: log the cost all the same
        config = with_episode_end_callback(config, log_episode_cost)
    algorithm = config.build_algo()
    if per_world:  # RLlib's per-world episodes, the path these runs took before issue 58
        runner = algorithm.env_runner
        runner.array_rollout, runner.array_rollout_refusal = None, "benchmark"
    rows = []
    (out / name).mkdir(parents=True, exist_ok=True)
    try:
        with open(out / name / f"seed{seed}.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            while True:
                result = algorithm.train()
                # Empty when a restarted env runner reported nothing this iteration.
                runners = result.get("env_runners", {})
                episodes = runners.get(COST_EPISODES_DONE, 0) or 0
                row = {
                    "timesteps_total": result.get("num_env_steps_sampled_lifetime", 0),
                    "agent_return_mean": runners.get("episode_return_mean", float("nan"))
                    / N_AGENTS,
                    "episode_cost_mean": runners[EPISODE_COST_SUM] / episodes
                    if episodes
                    else float("nan"),
                    "cost_multiplier": spec.progress(result).get("cost_multiplier", float("nan")),
                }
                row["_episodes"], row["_cost_sum"] = episodes, runners.get(EPISODE_COST_SUM, 0.0)
                rows.append(row)
                writer.writerow({k: row[k] for k in FIELDS})
                f.flush()
                if row["timesteps_total"] >= steps:
                    break
    finally:
        algorithm.stop()
    last = rows[-tail:]
    episodes = sum(r["_episodes"] for r in last)
    return {
        "agent_return": float(np.nanmean([r["agent_return_mean"] for r in last])),
        "episode_cost": sum(r["_cost_sum"] for r in last) / max(episodes, 1),
        "cost_multiplier": last[-1]["cost_multiplier"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=60_000, help="env steps per run")
    parser.add_argument("--tail", type=int, default=3, help="final iterations averaged")
    parser.add_argument(
        "--algorithms", nargs="+", default=["mappo_lag", "mappo_focops", "efx_mappo"]
    )
    parser.add_argument(
        "--cost-limit",
        type=float,
        default=None,
        help="fixed limit; then mappo runs only when listed in --algorithms",
    )
    parser.add_argument("--limit-fraction", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=Path("runs/safe_spread"))
    parser.add_argument(
        "--per-world", action="store_true", help="sample through RLlib's per-world path"
    )
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)

    table: dict[str, list[dict]] = {}

    def report(name: str) -> None:
        finals = table[name]
        print(
            f"{name:<14} return/agent {np.mean([r['agent_return'] for r in finals]):8.3f}  "
            f"episode cost {np.mean([r['episode_cost'] for r in finals]):6.3f}  "
            f"per seed {[round(r['episode_cost'], 3) for r in finals]}",
            flush=True,
        )

    if args.cost_limit is None:  # the limit comes from mappo's cost measured here
        table["mappo"] = [
            run("mappo", s, args.steps, args.tail, args.out, {}, args.per_world) for s in args.seeds
        ]
        report("mappo")
        mappo_cost = float(np.mean([r["episode_cost"] for r in table["mappo"]]))
        limit = args.limit_fraction * mappo_cost
        print(f"cost_limit = {limit:.3f} (mappo's mean episode cost {mappo_cost:.3f})")
    else:
        limit = args.cost_limit
    for name in args.algorithms:
        overrides = {} if name in ("efx_mappo", "ippo", "mappo") else {"cost_limit": limit}
        table[name] = [
            run(name, s, args.steps, args.tail, args.out, overrides, args.per_world)
            for s in args.seeds
        ]
        report(name)
    ray.shutdown()

    print(
        f"\n{'algorithm':<14} {'return/agent':>12} {'episode cost':>13} {'lambda':>8}  "
        f"(mean of seeds {args.seeds}, last {args.tail} iterations at {args.steps} env "
        f"steps; cost_limit {limit:.3f})"
    )
    for name, finals in table.items():
        lam = np.mean([r["cost_multiplier"] for r in finals])
        print(
            f"{name:<14} {np.mean([r['agent_return'] for r in finals]):12.3f} "
            f"{np.mean([r['episode_cost'] for r in finals]):13.3f} {lam:8.3f}"
        )
    print(json.dumps({"cost_limit": limit, **table}))


if __name__ == "__main__":
    main()
