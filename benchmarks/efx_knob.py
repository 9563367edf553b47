"""Does the budget z change what a trained EFX team does? z-sweeps over seeds.

For every seed's checkpoint under ``<runs>/<label>/seed<k>/checkpoint`` (written by
``efx_evidence.py --checkpoint``): ``--z-sweep`` over the trained ``[floor, z_high]``,
the team at ``z = z_low`` (no demand) and ``--z auto`` (``--tolerance``, default 5%);
for ``--baseline`` checkpoints the trained team as is. Every checkpoint's numbers are
cached next to it (``knob.json``), so a rerun only replays new checkpoints.

Prints per task: the sweep (mean [min, max] over seeds of team extrinsic and intrinsic
return, coefficient 1, and success rate), the rise of the intrinsic return from the
first to the last budget as a share of the swept range and of ``[z_low, z_high]``, the
largest fall between neighbouring budgets, extrinsic return at ``z_low`` against the
baseline's, and what ``--z auto`` picks. ``--out`` plots both curves (mean and min-max
band over seeds) per task.

    python benchmarks/efx_knob.py --runs runs/knob/grid-pass runs/knob/mpe-simple_spread \
        --label efx_push --baseline mappo --out docs/efx_tradeoff.png
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
    sweep_budgets,
)
from marllib_ext.algos.restore import restored_algorithm
from marllib_ext.plotting import save_figure


def replay_efx(checkpoint: Path, points: int, episodes: int, tolerance: float | None) -> dict:
    with restored_algorithm(checkpoint) as algorithm:
        controller = budget_connector(algorithm.env_runner).controller
        bounds = {"z_low": controller.z_low, "z_high": controller.z_high, "floor": controller.floor}
        at_low = play_episodes(algorithm.env_runner, episodes, coef=1.0, z=controller.z_low)
    sweep = sweep_budgets(checkpoint, points=points, episodes=episodes)
    choice = choose_budget(checkpoint, tolerance=tolerance, episodes=episodes)
    chosen = next(p for p in choice.points if p.z == choice.z)
    return {
        **bounds,
        "sweep": [[p.z, p.extrinsic_return, p.intrinsic_return, p.success_rate] for p in sweep],
        "low": [at_low.extrinsic_return, at_low.intrinsic_return, at_low.success_rate],
        "auto": [choice.z, chosen.extrinsic_return, chosen.intrinsic_return, chosen.success_rate],
    }


def replay_baseline(checkpoint: Path, episodes: int) -> dict:
    with restored_algorithm(checkpoint) as algorithm:
        point = play_episodes(algorithm.env_runner, episodes, coef=1.0, z=None)
    return {"low": [point.extrinsic_return, point.intrinsic_return, point.success_rate]}


def cached(checkpoint: Path, compute) -> dict:
    return common.cached_json(checkpoint.parent / "knob.json", compute)


def spread(values) -> str:
    values = np.asarray([np.nan if v is None else v for v in values], dtype=float)
    return f"{np.nanmean(values):8.2f} [{np.nanmin(values):.2f}, {np.nanmax(values):.2f}]"


def report(task_dir: Path, efx: list[dict], baseline: list[dict]) -> None:
    print(f"\n{task_dir.name}: {len(efx)} EFX seeds, {len(baseline)} baseline seeds")
    sweeps = np.array([run["sweep"] for run in efx], dtype=float)  # (seeds, points, 4)
    print(f"{'z':>18} {'team extrinsic':>24} {'team intrinsic':>26} {'success':>22}")
    for index in range(sweeps.shape[1]):
        z, ext, intr, success = (sweeps[:, index, k] for k in range(4))
        print(f"{spread(z)} {spread(ext)} {spread(intr)} {spread(success)}")
    intrinsic = sweeps[:, :, 2]
    rise = intrinsic[:, -1] - intrinsic[:, 0]
    swept = np.array([run["z_high"] - run["floor"] for run in efx])
    full = np.array([run["z_high"] - run["z_low"] for run in efx])
    falls = np.max(intrinsic[:, :-1] - intrinsic[:, 1:], axis=1)
    print(f"floor (start of the sweep): {spread([run['floor'] for run in efx])}")
    print(f"intrinsic rise, first -> last budget: {spread(rise)}")
    print(f"  as a share of the swept range [floor, z_high]: {spread(rise / swept)}")
    print(f"  as a share of [z_low, z_high]: {spread(rise / full)}")
    print(f"largest intrinsic fall between neighbouring budgets: {spread(falls)}")
    low = np.array([run["low"] for run in efx], dtype=float)
    print(
        f"at z_low: extrinsic {spread(low[:, 0])}, intrinsic {spread(low[:, 1])}, "
        f"success {spread(low[:, 2])}"
    )
    if baseline:
        base = np.array([run["low"] for run in baseline], dtype=float)
        print(
            f"baseline: extrinsic {spread(base[:, 0])}, intrinsic {spread(base[:, 1])}, "
            f"success {spread(base[:, 2])}"
        )
    auto = np.array([run["auto"] for run in efx], dtype=float)
    print(
        f"--z auto: z {spread(auto[:, 0])}, extrinsic {spread(auto[:, 1])}, "
        f"intrinsic {spread(auto[:, 2])}, success {spread(auto[:, 3])}"
    )


def plot(tasks: list[tuple[str, list[dict], list[dict]]], out: Path, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(tasks), 2, figsize=(10, 3.6 * len(tasks)), squeeze=False)
    for row, (name, efx, baseline) in enumerate(tasks):
        sweeps = np.array([run["sweep"] for run in efx], dtype=float)
        z = sweeps[:, :, 0].mean(axis=0)
        for col, (k, what) in enumerate(
            ((1, "team extrinsic return"), (2, "team intrinsic return"))
        ):
            axis = axes[row, col]
            values = sweeps[:, :, k]
            axis.plot(z, values.mean(axis=0), "o-", label=f"{label} over z (mean of {len(efx)})")
            axis.fill_between(z, values.min(axis=0), values.max(axis=0), alpha=0.25)
            low = np.array([run["low"][k - 1] for run in efx])
            axis.errorbar(
                [np.mean([run["z_low"] for run in efx])],
                [low.mean()],
                yerr=[[low.mean() - low.min()], [low.max() - low.mean()]],
                fmt="D",
                color="tab:green",
                label=f"{label} at z_low",
            )
            if baseline:
                base = np.array([run["low"][k - 1] for run in baseline])
                axis.axhline(base.mean(), color="gray", linestyle="--", label="mappo (mean)")
                axis.axhspan(base.min(), base.max(), color="gray", alpha=0.15)
            if k == 2:
                axis.plot(z, z, ":", color="black", linewidth=1, label="= z")
            axis.set_xlabel("budget z (team intrinsic return to collect)")
            axis.set_ylabel(what)
            axis.set_title(name)
            axis.legend(fontsize=7)
    print(f"wrote {save_figure(figure, out)}")


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="<out>/<task> folders")
    parser.add_argument("--label", default="efx_push")
    parser.add_argument("--baseline", default="mappo")
    parser.add_argument("--points", type=int, default=7)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--tolerance", type=float, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    common.start_ray(num_cpus=2)
    tasks = []
    for task_dir in args.runs:
        efx = [
            cached(c, lambda c=c: replay_efx(c, args.points, args.episodes, args.tolerance))
            for c in sorted(task_dir.glob(f"{args.label}/seed*/checkpoint"))
        ]
        baseline = [
            cached(c, lambda c=c: replay_baseline(c, args.episodes))
            for c in sorted(task_dir.glob(f"{args.baseline}/seed*/checkpoint"))
        ]
        if efx:
            report(task_dir, efx, baseline)
            tasks.append((task_dir.name, efx, baseline))
    ray.shutdown()
    if args.out is not None and tasks:
        plot(tasks, args.out, args.label)


if __name__ == "__main__":
    main()
