"""What trained teams deliver at their deployment budget, from efx_evidence checkpoints.

For every seed's checkpoint under ``<runs>/<label>/seed<k>/checkpoint`` plays
``--episodes`` episodes with sampled actions: EFX runs at the controller's budget and
at the budget ``--z auto`` picks (bisection, ``--tolerance``), baselines as trained.
Prints team extrinsic and intrinsic return (``-sum log pi``, coefficient 1) per seed
and their mean over seeds; ``--sweep-out FILE`` also writes the z-sweep plot of the
first EFX checkpoint.

    python benchmarks/efx_deployment.py --runs runs/efx_evidence/mpe-simple_spread \
        --labels efx_hinge mappo --sweep-out docs/efx_tradeoff.png
"""

from __future__ import annotations

from pathlib import Path

import common
import numpy as np
import ray

from marllib_ext.algos.efx import budget_connector
from marllib_ext.algos.efx.deployment import (
    choose_budget,
    play_episodes,
    plot_budget_sweep,
    sweep_budgets,
)
from marllib_ext.algos.restore import restored_algorithm


def play(checkpoint: Path, episodes: int, z: float | None = None) -> tuple[float, float]:
    """Team extrinsic and intrinsic return (coefficient 1) at budget ``z``; None: the
    controller's deployment budget for EFX, the trained policy for the others."""
    with restored_algorithm(checkpoint) as algorithm:
        runner = algorithm.env_runner
        if z is None:
            connector = budget_connector(runner)
            z = None if connector is None else connector.budget
        point = play_episodes(runner, episodes, coef=1.0, z=z)
    return point.extrinsic_return, point.intrinsic_return


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--runs", type=Path, required=True, help="<out>/<task> folder")
    parser.add_argument("--labels", nargs="+", default=["efx_hinge", "mappo"])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--tolerance", type=float, default=None)
    parser.add_argument("--sweep-points", type=int, default=7)
    parser.add_argument("--sweep-out", type=Path, default=None)
    args = parser.parse_args()
    common.start_ray(num_cpus=2)
    swept = False
    for label in args.labels:
        rows = []
        for checkpoint in sorted(args.runs.glob(f"{label}/seed*/checkpoint")):
            extrinsic, intrinsic = play(checkpoint, args.episodes)
            row = {"seed": checkpoint.parent.name, "ext": extrinsic, "int": intrinsic}
            if label.startswith("efx"):
                choice = choose_budget(checkpoint, tolerance=args.tolerance, episodes=20)
                ext_auto, int_auto = play(checkpoint, args.episodes, z=choice.z)
                row.update(z_auto=choice.z, ext_auto=ext_auto, int_auto=int_auto)
                if args.sweep_out is not None and not swept:
                    points = sweep_budgets(checkpoint, points=args.sweep_points, episodes=20)
                    for p in points:
                        print(
                            f"  sweep z {p.z:8.2f}: extrinsic {p.extrinsic_return:8.2f} "
                            f"intrinsic {p.intrinsic_return:8.2f} success {p.success_rate}"
                        )
                    plot_budget_sweep(
                        points, args.sweep_out, title=f"{label} {checkpoint.parent.name}"
                    )
                    swept = True
            rows.append(row)
            print(
                label,
                {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()},
                flush=True,
            )
        for key in ("ext", "int", "z_auto", "ext_auto", "int_auto"):
            values = [r[key] for r in rows if key in r]
            if values:
                print(
                    f"{label:<12} {key:<9} mean {np.mean(values):9.3f} "
                    f"[{np.min(values):.3f}, {np.max(values):.3f}] over {len(values)} seeds"
                )
    ray.shutdown()


if __name__ == "__main__":
    main()
