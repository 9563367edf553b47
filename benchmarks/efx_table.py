"""Summary table of ``efx_evidence.py`` runs (reads the CSVs only; no training).

Per configuration, over seeds, from the last ``--last`` iterations of each run: team
return at the deployment budget and over the training mixture, success rate at the
deployment budget, team intrinsic return, EFX's binding and demand-met fractions and
the controller's z; plus how many seeds ever reached a deployment success rate of at
least 0.5 and the first env step at which they did.

    python benchmarks/efx_table.py runs/efx_evidence/grid-pass
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from marllib_ext.plotting import read_progress


def spread(values: list[float], digits: int = 2) -> str:
    values = np.asarray(values, dtype=float)
    if np.all(np.isnan(values)):
        return "-"
    mean, low, high = np.nanmean(values), np.nanmin(values), np.nanmax(values)
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task_dir", type=Path)
    parser.add_argument("--last", type=int, default=3, help="iterations averaged per run")
    parser.add_argument("--labels", nargs="*", default=None)
    parser.add_argument(
        "--curve-at",
        type=int,
        nargs="*",
        default=[],
        metavar="STEPS",
        help="also a table of the deploy return at these env steps (linear between iterations)",
    )
    args = parser.parse_args()
    labels = args.labels or sorted(p.name for p in args.task_dir.iterdir() if p.is_dir())
    print(
        "| configuration | seeds | env steps | deploy return | mixture return | deploy success "
        "| solved seeds (first step) | deploy intrinsic | binding | demand met | z |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label in labels:
        runs = [
            read_progress(p) for p in sorted((args.task_dir / label).glob("seed*/progress.csv"))
        ]
        runs = [r for r in runs if r]
        if not runs:
            continue

        def tail(key, runs=runs):
            return [float(np.nanmean(r[key][-args.last :])) for r in runs]

        firsts = []
        for r in runs:
            hits = np.flatnonzero(r["deploy_success_rate"] >= 0.5)
            if hits.size:
                firsts.append(r["timesteps_total"][hits[0]])
        solved = f"{len(firsts)}/{len(runs)}"
        if firsts:
            solved += f" ({np.mean(firsts) / 1000:.0f}k)"
        steps = int(min(r["timesteps_total"][-1] for r in runs))
        print(
            f"| `{label}` | {len(runs)} | {steps} | {spread(tail('deploy_return_mean'))} | "
            f"{spread(tail('episode_return_mean'))} | {spread(tail('deploy_success_rate'))} | "
            f"{solved} | {spread(tail('deploy_intrinsic_return_mean'), 1)} | "
            f"{spread(tail('efx_binding_fraction'), 3)} | "
            f"{spread(tail('efx_demand_met_fraction'), 2)} | {spread(tail('budget_z'), 1)} |"
        )
    if args.curve_at:
        curve_table(args.task_dir, labels, args.curve_at)


def curve_table(task_dir: Path, labels: list[str], at: list[int]) -> None:
    """The deployment policy's return over training: mean [min, max] over seeds at each
    env step in ``at`` (linear between the iterations around it)."""
    print("\n| configuration | " + " | ".join(f"{s / 1000:g}k" for s in at) + " |")
    print("|---|" + "---|" * len(at))
    for label in labels:
        runs = [
            r
            for p in sorted((task_dir / label).glob("seed*/progress.csv"))
            if (r := read_progress(p))
        ]
        if not runs:
            continue
        values = [
            np.interp(at, r["timesteps_total"], np.nan_to_num(r["deploy_return_mean"]))
            for r in runs
        ]  # an iteration without a deployment episode counts as 0
        columns = np.array(values)
        print(f"| `{label}` | " + " | ".join(spread(columns[:, k]) for k in range(len(at))) + " |")


if __name__ == "__main__":
    main()
