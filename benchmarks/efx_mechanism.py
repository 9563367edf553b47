"""EFX's mechanism over training, read from the TensorBoard scalars of an experiment's
stored runs (``marllib-ext benchmark`` writes them under ``runs/<task>/<label>/seed_k/tb``):

    python benchmarks/efx_mechanism.py benchmarks/results/efx_secret_room [more dirs]

For every run: the training episodes that reached the goal (about: each iteration's
``episode_success_mean`` times its episodes, summed) and the first iteration with one,
the policy's entropy, and for EFX runs, in the first and the last quarter of training,
the share of rows short of their budget, the share where the cap binds, the push weight
and its term's size, the intrinsic return of episodes started at ``z_low`` and at
``z_high`` (how far the knob moves behaviour) and the deployment budget. Prints one
Markdown table per experiment.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
from critic_fit import scalars

EFX_TAGS = {
    "unmet": "learners/joint_critic/efx_unmet_row_fraction",
    "binding": "learners/joint_critic/efx_binding_fraction",
    "weight": "learners/joint_critic/efx_push_weight_mean",
    "|push|": "learners/joint_critic/efx_push_term_abs_mean",
    "J_int(z_low)": "efx/intrinsic_return_at_z_low",
    "J_int(z_high)": "efx/intrinsic_return_at_z_high",
    "z deploy": "efx/budget_z",
}


def quarters(values: list[float]) -> str:
    """``first-quarter mean -> last-quarter mean`` of a scalar's series."""
    series = np.asarray(values, dtype=float)
    if series.size == 0:
        return "-"
    q = max(1, series.size // 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        first, last = np.nanmean(series[:q]), np.nanmean(series[-q:])
    return f"{first:.3g} -> {last:.3g}"


def run_row(run: Path) -> dict[str, str]:
    """One run's mechanism figures (its events file's scalars)."""
    events = sorted(run.glob("tb/events.out.tfevents.*"))
    if not events:
        return {}
    s = scalars(events[-1])
    success = np.nan_to_num(np.asarray(s.get("env_runners/episode_success_mean", [])))
    episodes = np.asarray(s.get("env_runners/num_episodes", []))[: success.size]
    found = success[: episodes.size] * episodes
    hits = np.flatnonzero(found > 0)
    row = {
        "goal reached (train)": f"{found.sum():.0f}",
        "first at iter": str(int(hits[0]) + 1) if hits.size else "-",
        "entropy": quarters(s.get("learners/shared/entropy", [])),
    }
    for name, tag in EFX_TAGS.items():
        if tag in s:
            row[name] = quarters(s[tag])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="+", type=Path)
    args = parser.parse_args()
    for root in args.experiments:
        rows = []
        for run in sorted(root.glob("runs/*/*/seed_*")):
            figures = run_row(run)
            if figures:
                rows.append((f"{run.parent.name} {run.name}", figures))
        if not rows:
            continue
        columns = list(dict.fromkeys(k for _, figures in rows for k in figures))
        print(f"\n## {root.name}\n")
        print("| run | " + " | ".join(columns) + " |")
        print("|---" * (len(columns) + 1) + "|")
        for name, figures in rows:
            print(f"| {name} | " + " | ".join(figures.get(c, "") for c in columns) + " |")


if __name__ == "__main__":
    main()
