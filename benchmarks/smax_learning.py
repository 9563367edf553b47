"""`mappo` and `qmix` on SMAX against the heuristic enemy: train at an equal env-step
budget over seeds, then evaluate the win rate of the final checkpoint.

    python benchmarks/smax_learning.py --scenario 3m --labels mappo qmix --seeds 0 1 2 \\
        --steps 100000 --episodes 32

Each (label, seed) writes ``<out>/<scenario>/<label>/seed<k>.json`` (resumable: a run
with its JSON is read, not rerun): the env steps, wall time, the last training
iteration's episode return, and the evaluated win rate (``evaluate``: sampled actions,
``info["success"]`` of each battle's last step).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import ray

from marllib_ext import algos, make_env
from marllib_ext.algos.evaluation import evaluate


def run(scenario: str, label: str, seed: int, steps: int, episodes: int, out: Path) -> dict:
    path = out / scenario / label / f"seed{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    start = time.perf_counter()
    result = algos.get(label).fit(
        make_env(f"smax:{scenario}"),
        stop={"timesteps_total": steps},
        local_dir=Path("runs") / "smax" / scenario / label / f"seed{seed}",
        seed=seed,
    )
    wall = time.perf_counter() - start
    evaluated = evaluate(result.checkpoint_path, episodes=episodes)
    row = {
        "env_steps": int(result.final["timesteps_total"]),
        "wall_s": wall,
        "train_episode_return": float(result.final["episode_return_mean"]),
        "win_rate": evaluated.success_rate,
        "eval_team_return": evaluated.team_return_mean,
        "episodes": len(evaluated.successes),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row, indent=1))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="3m")
    parser.add_argument("--labels", nargs="+", default=["mappo", "qmix"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/smax"))
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    rows = {}
    for label in args.labels:
        for seed in args.seeds:
            row = run(args.scenario, label, seed, args.steps, args.episodes, args.out)
            rows.setdefault(label, []).append(row)
            print(f"smax:{args.scenario} {label} seed {seed}: {row}", flush=True)
    ray.shutdown()
    print("\n| team | env steps | win rate, mean [min, max] | team return | wall s per run |")
    print("|---|---|---|---|---|")
    for label, runs in rows.items():
        wins = [r["win_rate"] for r in runs]
        print(
            f"| `{label}` ({len(runs)} seeds) | {runs[0]['env_steps']} | {np.mean(wins):.2f} "
            f"[{min(wins):.2f}, {max(wins):.2f}] | "
            f"{np.mean([r['eval_team_return'] for r in runs]):.2f} | "
            f"{np.mean([r['wall_s'] for r in runs]):.0f} |"
        )


if __name__ == "__main__":
    main()
