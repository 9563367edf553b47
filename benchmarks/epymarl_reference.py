"""EPyMARL itself on the same lbforaging tasks: its sacred records read into the JSONs
of ``lbf_learning.py``, so both tables come from one summary (EPyMARL's maximum and
average return on its 50k test grid, the final greedy evaluation).

The reference runs (uoe-agents/epymarl at commit cbc38c0, Sep 2024, with this
package's lbforaging 2.0 and torch; CPU, one env, one torch thread)::

    OMP_NUM_THREADS=1 python src/main.py --config=qmix --env-config=gymma with \\
        env_args.time_limit=50 env_args.key="lbforaging:Foraging-10x10-3p-3f-v3" \\
        seed=0 use_cuda=False

Every setting is EPyMARL's own (``src/config/default.yaml``, ``algs/qmix.yaml``,
``envs/gymma.yaml``: ``t_max`` 2.05M, 100 greedy test episodes every 50k env steps).
One local edit: ``src/envs/__init__.py`` imports its SMAClite wrapper inside
``try``, since SMAClite is not on the package index and LBF runs do not use it.

    python benchmarks/epymarl_reference.py EPYMARL/results/sacred/qmix/*/[0-9]* \\
        --out benchmarks/results/epymarl_reference

writes ``<out>/<task>/<algorithm>/seed<k>.json`` per sacred run and prints the
summaries next to the package's runs of the same task (``--package``).
"""

from __future__ import annotations

import json
from pathlib import Path

import common
import numpy as np

from marllib_ext.ops.statistics import evaluations_at, maximum_and_average_return


def series(info: dict, key: str) -> list[list[float]]:
    """``[[env_steps, value], ...]`` of one sacred stat (values may be stored as
    ``{"value": v}``)."""
    values = [v["value"] if isinstance(v, dict) else v for v in info.get(key, [])]
    return [[int(t), float(v)] for t, v in zip(info.get(f"{key}_T", []), values, strict=True)]


EPYMARL_TEST_INTERVAL = 50_000  # uoe-agents/epymarl src/config/envs/gymma.yaml


def print_epymarl_summaries(rows: dict[str, list[dict]], budget: int, interval: int) -> None:
    print("\n| label | seeds | maximum return (best grid point) | average return | final greedy |")
    print("|---|---|---|---|---|")
    curves = {}
    for label, runs in rows.items():
        if not all(run.get("evaluations") for run in runs):
            continue
        at_grid = evaluations_at(
            [np.array([e[0] for e in run["evaluations"]]) for run in runs],
            [np.array([e[1] for e in run["evaluations"]]) for run in runs],
            interval,
            budget,
        )
        best, average = maximum_and_average_return(at_grid)
        means = at_grid.mean(axis=1)  # NaN where a seed has no evaluation yet
        at = (int(np.nanargmax(means)) + 1) * interval
        final = [run["greedy_team_return"] for run in runs]
        print(
            f"| `{label}` | {len(runs)} | {best:.2f} (at {at // 1000}k) | {average:.2f} | "
            f"{np.mean(final):.2f} [{min(final):.2f}, {max(final):.2f}] |"
        )
        curves[label] = at_grid
    if curves:  # the greedy evaluations on the grid, every 5th point: mean [min, max]
        points = range(4, len(next(iter(curves.values()))), 5)
        heads = " | ".join(f"{(g + 1) * interval // 1000}k" for g in points)
        print(f"\n| label | {heads} |\n|---|" + "---|" * len(points))
        for label, at_grid in curves.items():
            cells = " | ".join(
                f"{np.mean(at_grid[g]):.2f} [{np.min(at_grid[g]):.2f}, {np.max(at_grid[g]):.2f}]"
                for g in points
            )
            print(f"| `{label}` | {cells} |")


def record_of(run_dir: Path) -> tuple[str, str, int, dict]:
    """(task, algorithm, seed, record) of one sacred run directory."""
    config = json.loads((run_dir / "config.json").read_text())
    info = json.loads((run_dir / "info.json").read_text())
    evaluations = series(info, "test_return_mean")[1:]  # the first test is before training
    if not evaluations:
        raise ValueError(f"{run_dir}: no test_return_mean after training started")
    train = series(info, "return_mean")
    record = {
        "source": "uoe-agents/epymarl cbc38c0",
        "env_steps": evaluations[-1][0],
        "t_max": int(config["t_max"]),
        "greedy_team_return": evaluations[-1][1],
        "train_episode_return": train[-1][1] if train else None,
        "evaluations": evaluations,
        # the learner's logged means (per agent: Q_tot / n_agents for the mixers)
        "q_taken_mean": series(info, "q_taken_mean"),
        "target_mean": series(info, "target_mean"),
    }
    task = config["env_args"]["key"].split(":")[-1]
    return task, config["name"], int(config["seed"]), record


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="sacred run directories")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/epymarl_reference"))
    parser.add_argument(
        "--package",
        type=Path,
        default=Path("benchmarks/results/lbf_epymarl_eval"),
        help="lbf_learning.py results of the same tasks, printed alongside",
    )
    parser.add_argument("--steps", type=int, default=2_050_000)
    args = parser.parse_args()
    rows: dict[str, dict[str, list[dict]]] = {}
    for run_dir in args.runs:
        task, algorithm, seed, record = record_of(run_dir)
        path = args.out / task / algorithm / f"seed{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1))
        rows.setdefault(task, {}).setdefault(f"EPyMARL {algorithm}", []).append(record)
        print(f"{path}: {record['env_steps']} env steps, final greedy "
              f"{record['greedy_team_return']:.3f}")  # fmt: skip
    for task, labels in rows.items():
        for label_dir in sorted((args.package / task).glob("*")):
            runs = [json.loads(p.read_text()) for p in sorted(label_dir.glob("seed*.json"))]
            if runs:
                labels[label_dir.name] = runs
        print(f"\n## {task}")
        budget = min(r["env_steps"] for runs in labels.values() for r in runs)
        print_epymarl_summaries(labels, min(budget, args.steps), EPYMARL_TEST_INTERVAL)


if __name__ == "__main__":
    main()
