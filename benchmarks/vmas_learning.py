"""`mappo` on VMAS tasks at equal env-step budgets over seeds, against the uniformly
random team.

Training (resumable: a run whose CSV reached ``--steps`` is read, not rerun)::

    python benchmarks/vmas_learning.py --tasks navigation balance --seeds 0 1 2 \\
        --steps 300000

The table (trains nothing; plays the random team through the env adapter)::

    python benchmarks/vmas_learning.py --tasks navigation balance --report

The return is ``agent_return_mean``: the mean over agents of each agent's episode
return (VMAS's per-agent rewards), over the episodes that ended in the iteration.
"""

from __future__ import annotations

import argparse
import csv
import warnings
from pathlib import Path

import numpy as np
import ray
from run_csv import finished_run, mean_at, window_mean

from marllib_ext import algos, make_env
from marllib_ext.algos.api import progress_row

WINDOW = 5
# Team labels: the algorithm and its settings.
TEAMS = {
    "mappo": ("mappo", {}),
    # The joint critic on each minibatch's frames (BenchMARL's critic work).
    "mappo_equal_passes": ("mappo", {"module_minibatches": "equal_passes"}),
    "ippo": ("ippo", {}),
    "vdppo": ("vdppo", {}),
    # The learner fed episode chunks through its connectors instead of rollout blocks.
    "ippo_chunks": ("ippo", {}),
    "vdppo_chunks": ("vdppo", {}),
    # Families that take rollout blocks since issue 58 (HAPPO: one policy per agent).
    "happo": ("happo", {}),
    "happo_chunks": ("happo", {}),
    "maa2c": ("maa2c", {}),
    "maa2c_chunks": ("maa2c", {}),
    # Whole-batch steps: the two data paths' batches give the same update up to float
    # rounding, whatever the rows' order.
    "happo_whole": ("happo", {"minibatch_size": None}),
    "happo_whole_chunks": ("happo", {"minibatch_size": None}),
    # EFX on rollout blocks (its budget in the rollout) and on RLlib's per-world path
    # with the budget connector, as before issue 58.
    "efx_mappo": ("efx_mappo", {}),
    "efx_mappo_per_world": ("efx_mappo", {}),
}
CHUNK_LABELS = {
    "ippo_chunks", "vdppo_chunks", "happo_chunks", "maa2c_chunks", "happo_whole_chunks"
}  # fmt: skip
PER_WORLD_LABELS = {"efx_mappo_per_world"}
INDIVIDUAL = {"happo"}  # algorithms trained with one policy per agent


def random_team_return(task: str, episodes: int, seed: int = 10_000) -> float:
    """Mean per-agent episode return of uniformly random actions."""
    env = make_env(f"vmas:{task}").make_rllib_env()
    rng = np.random.default_rng(seed)
    returns = []
    for episode in range(episodes):
        observations, _ = env.reset(seed=seed + episode)
        total = 0.0
        while True:
            actions = {
                a: rng.uniform(env.action_space[a].low, env.action_space[a].high).astype(np.float32)
                for a in observations
            }
            observations, rewards, terminateds, truncateds, _ = env.step(actions)
            total += float(sum(rewards.values()))
            if terminateds["__all__"] or truncateds["__all__"]:
                break
        returns.append(total / len(env.possible_agents))
    return float(np.mean(returns))


def train(task: str, label: str, seed: int, steps: int, path: Path) -> None:
    if finished_run(path, steps):
        return
    name, settings = TEAMS[label]
    share_policy = "individual" if name in INDIVIDUAL else "all"
    algo = (
        algos.get(name, **settings)
        .rllib_config(make_env(f"vmas:{task}"), share_policy=share_policy, seed=seed)
        .build_algo()
    )
    if label in CHUNK_LABELS:
        algo.env_runner.array_rollout.blocks_refusal = "benchmark"
    if label in PER_WORLD_LABELS:
        runner = algo.env_runner
        runner.array_rollout, runner.array_rollout_refusal = None, "benchmark"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["timesteps_total", "agent_return_mean", "time_this_iter_s"])
        done = 0
        while done < steps:
            result = algo.train()
            row = progress_row(result)
            done = int(row["timesteps_total"])
            writer.writerow([done, row["agent_return_mean"], result["time_this_iter_s"]])
            f.flush()
    algo.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["navigation", "balance"])
    parser.add_argument("--labels", nargs="+", default=["mappo"], choices=list(TEAMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--episodes", type=int, default=50, help="random-team episodes")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/vmas"))
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    if not args.report:
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
        for task in args.tasks:
            for label in args.labels:
                for seed in args.seeds:
                    path = args.out / task / label / f"seed{seed}.csv"
                    train(task, label, seed, args.steps, path)
                    print(f"{task} {label} seed {seed}: done", flush=True)
        return
    half = args.steps // 2
    print(f"| task | team | env steps | return at {half // 1000}k | return at "
          f"{args.steps // 1000}k (last {WINDOW} iterations) | s/iteration |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for task in args.tasks:
        random = random_team_return(task, args.episodes)
        print(f"| {task} | random | - | - | {random:.3f} | - |")
        for label in args.labels:
            runs = [
                rows
                for seed in args.seeds
                if (rows := finished_run(args.out / task / label / f"seed{seed}.csv", args.steps))
            ]
            if not runs:
                continue
            middle = [mean_at(rows, half, "agent_return_mean", WINDOW) for rows in runs]
            final = [window_mean(rows, "agent_return_mean", WINDOW) for rows in runs]
            speed = [np.mean([r["time_this_iter_s"] for r in rows]) for rows in runs]
            print(
                f"| {task} | `{label}` ({len(runs)} seeds) | {args.steps // 1000}k | "
                f"{np.mean(middle):.3f} ± {np.std(middle):.3f} | {np.mean(final):.3f} ± "
                f"{np.std(final):.3f} [{min(final):.3f}, {max(final):.3f}] | "
                f"{np.mean(speed):.2f} |"
            )


if __name__ == "__main__":
    main()
