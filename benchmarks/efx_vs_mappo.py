"""Learning curves of `efx_mappo` vs `mappo` on mpe:simple_spread at equal env steps.

Each (algorithm, seed) run writes its progress rows to
``<out>/<algorithm>_seed<k>.csv`` (env steps, team return, per-agent return); the script
prints the final per-agent return per run and the mean over seeds.

    python benchmarks/efx_vs_mappo.py --steps 100000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import ray
from run_csv import finished_run

from marllib_ext import algos, make_env

ALGORITHMS = ("mappo", "efx_mappo")
FIELDS = ("timesteps_total", "episode_return_mean", "agent_return_mean", "time_total_s")


def run(name: str, steps: int, seed: int, out: Path) -> list[dict]:
    """Trains one (algorithm, seed); an existing CSV that reached ``steps`` is reused."""
    path = out / f"{name}_seed{seed}.csv"
    if (rows := finished_run(path, steps)) is not None:
        return rows
    rows = []
    algos.get(name).fit(
        make_env("mpe:simple_spread", N=3, max_cycles=25),
        stop={"timesteps_total": steps},
        seed=seed,
        local_dir=out / "runs",
        checkpoint_end=False,
        on_iteration=rows.append,
    )
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/efx_vs_mappo"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    finals: dict[str, list[float]] = {name: [] for name in ALGORITHMS}
    for seed in args.seeds:
        for name in ALGORITHMS:
            rows = run(name, args.steps, seed, args.out)
            finals[name].append(rows[-1]["agent_return_mean"])
            print(
                f"{name:<10} seed {seed}: {rows[-1]['timesteps_total']:.0f} env steps, final "
                f"per-agent return {rows[-1]['agent_return_mean']:.2f}",
                flush=True,
            )
    ray.shutdown()
    print(f"\n{'algorithm':<10} {'per-agent return (mean over seeds)':>36} {'per seed':>30}")
    for name, values in finals.items():
        per_seed = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name:<10} {np.mean(values):36.2f} {per_seed:>30}")
    print(json.dumps({"steps": args.steps, "seeds": args.seeds, "final": finals}))


if __name__ == "__main__":
    main()
