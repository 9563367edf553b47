"""The exploration/return frontier: `efx_mappo`'s z-sweep against `mappo`'s entropy bonus.

For every seed's checkpoint under ``<runs>/<label>/seed<k>/checkpoint`` (written by
``efx_evidence.py --checkpoint``): each ``--baselines`` label (``mappo`` at one entropy
coefficient) is played as trained, one point; ``--label`` (EFX) is played at
``--points`` budgets over ``[z_low, z_high]``, a curve, and at the deployment budget
its outer loop reached (the deployment row of the table). Every point plays ``--episodes``
episodes with sampled actions (as in training) and records the team extrinsic return,
the success rate (team return > 0), and two exploration measures that do not come
from either method (``marllib_ext.ops.exploration``):

- ``distinct``: distinct joint states per episode (all agents' observations at one env
  step, the budget column removed), for grid tasks;
- ``entropy``: the entropy of the state-visitation distribution over all the point's
  steps, each observation dimension cut into ``--bins`` cells of its declared bounds.

Prints per task the table (mean [min, max] over seeds) and the frontier check: at the
exploration level each entropy coefficient reaches (its mean over seeds), EFX's mean
curve's extrinsic return there (``return_at_exploration``) against that point's.
``--out`` draws extrinsic return against exploration. Numbers are cached next to
every checkpoint (``frontier.json``).

    python benchmarks/efx_frontier.py --runs runs/frontier/grid-pass --label efx_push \
        --baselines mappo_ent0 mappo mappo_ent05 mappo_ent1 mappo_ent2 --out docs/efx_frontier.png
"""

from __future__ import annotations

from pathlib import Path

import common
import numpy as np
import ray

from marllib_ext.algos.efx.deployment import (
    budget_range,
    current_budget,
    has_budget,
    set_fixed_budget,
)
from marllib_ext.algos.restore import restored_algorithm
from marllib_ext.ops.exploration import distinct_rows, return_at_exploration, visitation_entropy
from marllib_ext.plotting import save_figure
from marllib_ext.postprocessing.budget_input import plain_observation

MEASURES = {"distinct": "distinct joint states per episode", "entropy": "state-visitation entropy"}


def joint_states(episode, budget_columns: int) -> np.ndarray:
    """``(T + 1, d)`` every agent's observation at each env step (sorted agent ids),
    without the last ``budget_columns`` columns."""
    per_agent = []
    for agent_id in sorted(episode.agent_episodes):
        observations = [
            np.asarray(plain_observation(o), dtype=np.float64).reshape(-1)
            for o in episode.agent_episodes[agent_id].get_observations()
        ]
        per_agent.append(np.stack(observations)[:, : len(observations[0]) - budget_columns])
    if len({len(o) for o in per_agent}) != 1:
        raise ValueError("joint states need every agent to observe every env step")
    return np.concatenate(per_agent, axis=1)


def observation_bounds(runner) -> tuple[np.ndarray, np.ndarray]:
    """Declared bounds of the env's observations (budget column not included)."""
    spaces = runner.env.single_observation_spaces
    lows, highs = [], []
    for agent_id in sorted(spaces):
        space = spaces[agent_id]
        space = getattr(space, "spaces", {}).get("observation", space)
        lows.append(np.asarray(space.low, dtype=np.float64).reshape(-1))
        highs.append(np.asarray(space.high, dtype=np.float64).reshape(-1))
    return np.concatenate(lows), np.concatenate(highs)


def play_point(runner, episodes: int, z: float | None, bins: int, budget_columns: int) -> dict:
    if z is not None:
        set_fixed_budget(runner, z)
    played = runner.sample(num_episodes=episodes, explore=True, force_reset=True)[:episodes]
    states = [joint_states(e, budget_columns) for e in played]
    low, high = observation_bounds(runner)
    low, high = low[: states[0].shape[1]], high[: states[0].shape[1]]
    finite = np.isfinite(low) & np.isfinite(high) & (high > low)
    returns = [e.get_return() for e in played]
    return {
        "z": None if z is None else float(z),
        "extrinsic": float(np.mean(returns)),
        "success": float(np.mean([r > 0 for r in returns])),
        "distinct": float(np.mean([distinct_rows(s) for s in states])),
        "entropy": visitation_entropy(
            np.concatenate(states)[:, finite], low=low[finite], high=high[finite], bins=bins
        )
        if finite.any()
        else float("nan"),
    }


def replay(checkpoint: Path, points: int, episodes: int, bins: int) -> list[dict]:
    """Baselines: one point as trained. EFX: the deployment budget the outer loop
    reached first, then ``points`` budgets over ``[z_low, z_high]``."""
    with restored_algorithm(checkpoint) as algorithm:
        runner = algorithm.env_runner
        if not has_budget(runner):
            return [play_point(runner, episodes, None, bins, 0)]
        z_low, z_high = budget_range(runner)
        deploy = play_point(runner, episodes, None, bins, 1)
        deploy["z"] = current_budget(runner)
        return [deploy] + [
            play_point(runner, episodes, float(z), bins, 1)
            for z in np.linspace(z_low, z_high, points)
        ]


def cached(checkpoint: Path, compute) -> list[dict]:
    return common.cached_json(checkpoint.parent / "frontier.json", compute)


def spread(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{np.nanmean(values):7.2f} [{np.nanmin(values):.2f}, {np.nanmax(values):.2f}]"


def report(name, efx, baselines, measure, solved_at) -> list[str]:
    """Table lines of one task; ``efx``: (seeds, points, dict); ``baselines``: label -> seeds."""
    lines = [f"\n{name}: {len(efx)} EFX seeds; measure: {MEASURES[measure]}"]
    lines.append(f"{'point':<22} {'extrinsic':>22} {'success':>22} {'solved':>7} {measure:>22}")

    def row(label, runs):
        ext = [r["extrinsic"] for r in runs]
        solved = sum(r["success"] >= solved_at for r in runs)
        lines.append(
            f"{label:<22} {spread(ext)} {spread([r['success'] for r in runs])} "
            f"{solved:>3}/{len(runs):<3} {spread([r[measure] for r in runs])}"
        )

    for label, runs in baselines.items():
        row(label, [r[0] for r in runs])
    row(f"EFX deploy z={np.mean([r[0]['z'] for r in efx]):.1f}", [r[0] for r in efx])
    curve = [[run[k] for run in efx] for k in range(1, len(efx[0]))]  # (points, seeds)
    for point in curve:
        row(f"EFX z={np.mean([p['z'] for p in point]):.1f}", point)
    curve_x = [np.mean([p[measure] for p in point]) for point in curve]
    curve_y = [np.mean([p["extrinsic"] for p in point]) for point in curve]
    lines.append("frontier: EFX's mean curve at each entropy setting's exploration level")
    for label, runs in baselines.items():
        level = np.mean([r[0][measure] for r in runs])
        base = np.mean([r[0]["extrinsic"] for r in runs])
        efx_return = return_at_exploration(curve_x, curve_y, level)
        verdict = "beyond EFX's curve" if np.isnan(efx_return) else f"{efx_return - base:+.2f}"
        lines.append(
            f"  {label:<14} {measure} {level:7.2f}: return {base:.2f}, EFX {efx_return:.2f} "
            f"({verdict})"
        )
    return lines


def plot(tasks, measure: str, out: Path, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.2), squeeze=False)
    for axis, (name, efx, baselines) in zip(axes[0], tasks, strict=True):
        x = np.array([[p[measure] for p in run[1:]] for run in efx])
        y = np.array([[p["extrinsic"] for p in run[1:]] for run in efx])
        axis.plot(x.mean(0), y.mean(0), "o-", label=f"{label}, z-sweep (mean of {len(efx)})")
        axis.errorbar(
            x.mean(0),
            y.mean(0),
            yerr=[y.mean(0) - y.min(0), y.max(0) - y.mean(0)],
            fmt="none",
            alpha=0.35,
        )
        for base_label, runs in baselines.items():
            bx = np.array([r[0][measure] for r in runs])
            by = np.array([r[0]["extrinsic"] for r in runs])
            axis.errorbar(
                [bx.mean()],
                [by.mean()],
                xerr=[[bx.mean() - bx.min()], [bx.max() - bx.mean()]],
                yerr=[[by.mean() - by.min()], [by.max() - by.mean()]],
                fmt="s",
                capsize=3,
                alpha=0.8,
                label=base_label,
            )
        axis.set_xlabel(MEASURES[measure])
        axis.set_ylabel("team extrinsic return")
        axis.set_title(name)
        axis.legend(fontsize=7)
    print(f"wrote {save_figure(figure, out)}")


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="<out>/<task> folders")
    parser.add_argument("--label", default="efx_push")
    parser.add_argument(
        "--baselines",
        nargs="+",
        default=["mappo_ent0", "mappo", "mappo_ent05", "mappo_ent1", "mappo_ent2"],
    )
    parser.add_argument("--points", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--measure", choices=list(MEASURES), default="distinct")
    parser.add_argument("--bins", type=int, default=8)
    parser.add_argument(
        "--solved-at", type=float, default=0.5, help="success rate of a solved seed"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    common.start_ray(num_cpus=2)
    tasks = []
    for task_dir in args.runs:

        def runs_of(label, task_dir=task_dir):
            return [
                cached(c, lambda c=c: replay(c, args.points, args.episodes, args.bins))
                for c in sorted(task_dir.glob(f"{label}/seed*/checkpoint"))
            ]

        efx = runs_of(args.label)
        baselines = {b: runs for b in args.baselines if (runs := runs_of(b))}
        if efx:
            print("\n".join(report(task_dir.name, efx, baselines, args.measure, args.solved_at)))
            tasks.append((task_dir.name, efx, baselines))
    ray.shutdown()
    if args.out is not None and tasks:
        plot(tasks, args.measure, args.out, args.label)


if __name__ == "__main__":
    main()
