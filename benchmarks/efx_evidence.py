"""EFXplorer evidence: named configurations x seeds on one task at equal env-step budgets.

Each (configuration, seed) run writes ``<out>/<task>/<label>/seed<k>/progress.csv``
as it goes, one row per iteration: env steps, the training-mixture team return, the
team return and success rate of the episodes played at the deployment budget (EFX:
the controller's z; other algorithms: every episode), the team intrinsic return
``-sum_t sum_i log pi`` (coefficient 1, so every algorithm is measured on one scale),
and EFX's mechanism metrics (binding fraction, demand-met fraction, z). A finished run
(its CSV reached ``--steps``) is skipped, so an interrupted sweep resumes.

    python benchmarks/efx_evidence.py --task grid:pass --env-arg size=5 max_steps=125 \
        --configs efx_hinge efx_seed_dp mappo mappo_ent05 --seeds 0 1 2 3 4 --steps 60000
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import common
import numpy as np
import ray

from marllib_ext import algos, make_env
from marllib_ext.algos.api import progress_row, with_episode_end_callback
from marllib_ext.algos.efx import episode_team_intrinsic
from marllib_ext.policies import CRITIC_MODULE_ID
from marllib_ext.postprocessing.budget_connector import DEPLOY_KEY
from marllib_ext.postprocessing.efx_advantage import (
    BINDING_FRACTION,
    CAPPED_POSITIVE_FRACTION,
    DEMAND_MET_FRACTION,
    PUSH_TERM_ABS_MEAN,
    PUSH_WEIGHT_MEAN,
    REWARDED_ADVANTAGE_EXT,
    REWARDED_ADVANTAGE_FINAL,
    UNMET_ROW_FRACTION,
    Z0_MEAN,
    ZERO_BUDGET_ROW_FRACTION,
)

EFX_METRICS = (
    BINDING_FRACTION,
    DEMAND_MET_FRACTION,
    Z0_MEAN,
    UNMET_ROW_FRACTION,
    PUSH_WEIGHT_MEAN,
    PUSH_TERM_ABS_MEAN,
    CAPPED_POSITIVE_FRACTION,
    REWARDED_ADVANTAGE_EXT,
    REWARDED_ADVANTAGE_FINAL,
    ZERO_BUDGET_ROW_FRACTION,
)

# label -> (algorithm, overrides)
CONFIGS = {
    "efx_hinge": ("efx_mappo", {"efx_advantage": "hinge", "budget_range": "full"}),
    "efx_per_step": ("efx_mappo", {"efx_advantage": "per_step", "budget_range": "full"}),
    "efx_seed_dp": ("efx_mappo", {"efx_advantage": "seed_dp", "budget_range": "full"}),
    "efx_push": ("efx_mappo", {}),  # the defaults (extrinsic_push, push on the temperature)
    "efx_demand_push": ("efx_mappo", {"efx_advantage": "demand_push"}),
    "efx_extrinsic_push": ("efx_mappo", {"efx_advantage": "extrinsic_push"}),
    "efx_push_tracked": ("efx_mappo", {"budget_range": "tracked"}),
    # no budget temperature: the push goes through the policy
    "efx_plain_push": ("efx_mappo", {"budget_temperature": False, "push_gradient": "policy"}),
    **{
        f"efx_push_k{kappa:g}": ("efx_mappo", {"efx_advantage": "demand_push", "efx_kappa": kappa})
        for kappa in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
    },
    "mappo": ("mappo", {}),  # entropy_coeff 0.01
    "mappo_ent0": ("mappo", {"entropy_coeff": 0.0}),
    "mappo_ent05": ("mappo", {"entropy_coeff": 0.05}),
    "mappo_ent1": ("mappo", {"entropy_coeff": 0.1}),
    "mappo_ent2": ("mappo", {"entropy_coeff": 0.2}),
}
FIELDS = (
    "timesteps_total",
    "episode_return_mean",
    "agent_return_mean",
    "success_rate",
    "deploy_return_mean",
    "deploy_success_rate",
    "intrinsic_return_mean",
    "deploy_intrinsic_return_mean",
    "budget_z",
    "budget_floor",
    *EFX_METRICS,
)
KEYS = ("episodes", "successes", "return", "intrinsic")


def log_episode(*, episode, prev_episode_chunks=None, metrics_logger=None, **kwargs) -> None:
    """``on_episode_end``: success (positive team return), team return and intrinsic
    return with coefficient 1, for all episodes and for deployment-budget ones."""
    chunks = [*(prev_episode_chunks or []), episode]
    team_return = float(sum(c.get_return() for c in chunks))
    values = {
        "episodes": 1.0,
        "successes": float(team_return > 0),
        "return": team_return,
        "intrinsic": episode_team_intrinsic(chunks, coef=1.0),
    }
    deploy = episode.custom_data.get(DEPLOY_KEY, True)  # non-EFX: every episode
    for key, value in values.items():
        metrics_logger.log_value(f"bench_all_{key}", value, reduce="sum")
        if deploy:
            metrics_logger.log_value(f"bench_deploy_{key}", value, reduce="sum")


def row_of(result: dict, spec) -> dict:
    runners = result.get("env_runners", {})
    row = {k: v for k, v in progress_row(result, spec).items() if k in FIELDS}
    for group, prefix in (("all", ""), ("deploy", "deploy_")):
        episodes = runners.get(f"bench_{group}_episodes", 0) or 0

        def mean(key, n=episodes, g=group):
            return runners.get(f"bench_{g}_{key}", math.nan) / n if n else math.nan

        row[f"{prefix}success_rate"] = mean("successes")
        row[f"{prefix}intrinsic_return_mean"] = mean("intrinsic")
        if prefix:
            row["deploy_return_mean"] = mean("return")
    row["budget_floor"] = float(result.get("efx", {}).get("budget_floor", math.nan))
    critic = result.get("learners", {}).get(CRITIC_MODULE_ID, {})
    for key in EFX_METRICS:
        row[key] = float(critic.get(key, math.nan))
    return row


def finished(path: Path, steps: int) -> dict | None:
    if not path.exists():
        return None
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if rows and float(rows[-1]["timesteps_total"]) >= steps:
        return {k: float(v) for k, v in rows[-1].items()}
    return None


def run(task, label, seed, steps, out, env_args, overrides, checkpoint) -> dict:
    run_dir = out / task.replace(":", "-") / label / f"seed{seed}"
    done = finished(run_dir / "progress.csv", steps)
    if done is not None:
        return done
    name, preset = CONFIGS[label]
    config = with_episode_end_callback(
        algos.get(name, **{**preset, **overrides}).rllib_config(
            make_env(task, **env_args), seed=seed
        ),
        log_episode,
    )
    algorithm = config.build_algo()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with open(run_dir / "progress.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            while True:
                row = row_of(algorithm.train(), algos.get_algo_spec(name))
                writer.writerow(row)
                f.flush()
                if row["timesteps_total"] >= steps:
                    break
        if checkpoint:
            algorithm.save_to_path(str((run_dir / "checkpoint").resolve()))
        return row
    finally:
        algorithm.stop()


def summary(values: list[float]) -> str:
    values = np.asarray(values, dtype=float)
    return f"{np.nanmean(values):8.3f} [{np.nanmin(values):.3f}, {np.nanmax(values):.3f}]"


def main() -> None:
    from marllib_ext.cli import parse_assignments

    parser = common.parser(__doc__)
    parser.add_argument("--task", default="mpe:simple_spread")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300_000, help="env steps per run")
    parser.add_argument("--out", type=Path, default=Path("runs/efx_evidence"))
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--env-arg", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--checkpoint", action="store_true", help="save each run's checkpoint")
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    overrides = parse_assignments(args.set, "--set")
    env_args = parse_assignments(args.env_arg, "--env-arg")
    common.start_ray(num_cpus=args.num_cpus)
    finals = {}
    for seed in args.seeds:
        for label in args.configs:
            row = run(
                args.task, label, seed, args.steps, args.out, env_args, overrides, args.checkpoint
            )
            finals.setdefault(label, []).append(row)
            print(
                f"{args.task} {label:<13} seed {seed}: deploy return "
                f"{row['deploy_return_mean']:.3f}, success {row['deploy_success_rate']:.3f}, "
                f"intrinsic {row['deploy_intrinsic_return_mean']:.2f}",
                flush=True,
            )
    ray.shutdown()
    print(f"\n{args.task}, {args.steps} env steps, seeds {args.seeds}, env {env_args}")
    print("mean [min, max] over seeds of the last iteration:")
    for label, rows in finals.items():
        print(
            f"{label:<13} deploy return {summary([r['deploy_return_mean'] for r in rows])} "
            f"mixture return {summary([r['episode_return_mean'] for r in rows])} "
            f"deploy success {summary([r['deploy_success_rate'] for r in rows])} "
            f"deploy intrinsic {summary([r['deploy_intrinsic_return_mean'] for r in rows])}"
        )


if __name__ == "__main__":
    main()
