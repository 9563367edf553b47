"""Re-evaluates the final checkpoints of finished runs with more episodes, sampled
and greedy, and prints the win rate (where the env reports success) and the team
return per label, mean [min, max] over seeds:

    python benchmarks/evaluate_runs.py --runs benchmarks/runs/smax_3m \\
        --labels mappo mappo+use_rnn=true --episodes 200

``--runs``: the directory ``success_runs.run`` trains under (``runs/<env>/``), holding
``<label>/seed<k>/<run>/checkpoint``. Each evaluation is kept in
``<out>/<label>/seed<k>_<episodes>.json`` (resumable).
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np
import ray

from marllib_ext.algos.evaluation import evaluate


def evaluated(checkpoint: Path, episodes: int, path: Path) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    sampled = evaluate(checkpoint, episodes=episodes)
    greedy = evaluate(checkpoint, episodes=episodes, explore=False)
    row = {
        "episodes": episodes,
        "win_rate": sampled.success_rate,
        "team_return": sampled.team_return_mean,
        "greedy_win_rate": greedy.success_rate,
        "greedy_team_return": greedy.team_return_mean,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row, indent=1))
    return row


def spread(values: list[float]) -> str:
    if any(v is None for v in values):
        return "-"
    return f"{np.mean(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--labels", nargs="+", required=True)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    table = {}
    try:
        for label in args.labels:
            for seed_dir in sorted((args.runs / label).glob("seed*")):
                checkpoints = sorted(seed_dir.glob("*/checkpoint"))
                if not checkpoints:
                    continue
                path = args.out / label / f"{seed_dir.name}_{args.episodes}.json"
                row = evaluated(checkpoints[-1], args.episodes, path)
                table.setdefault(label, []).append(row)
                print(f"{label} {seed_dir.name}: {row}", flush=True)
    finally:
        ray.shutdown()
    print(f"\n{args.episodes} episodes per seed")
    print("| label | seeds | win rate | greedy win rate | team return | greedy team return |")
    print("|---|---|---|---|---|---|")
    for label, rows in table.items():
        cells = [
            spread([r[k] for r in rows])
            for k in ("win_rate", "greedy_win_rate", "team_return", "greedy_team_return")
        ]
        print(f"| `{label}` | {len(rows)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
