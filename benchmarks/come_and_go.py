"""Agents that take turns or die: mappo and ippo on 2-player Hanabi and on MAgent2's
battle against a random team, at equal env-step budgets over seeds, against the random
(legal-move) team.

Training (resumable: a run whose CSV reached ``--steps`` is read, not rerun)::

    python benchmarks/come_and_go.py --task hanabi:small --labels mappo ippo \\
        --seeds 0 1 2 --steps 200000
    python benchmarks/come_and_go.py --task magent:battle_v4 --env-arg opponent=random \\
        --labels mappo ippo --seeds 0 1 2 --steps 200000

The random team, and the trained runs' table (trains nothing)::

    python benchmarks/come_and_go.py --task hanabi:small --labels mappo ippo --report
    python benchmarks/come_and_go.py --task magent:battle_v4 --env-arg opponent=random \\
        --labels mappo ippo --report

Hanabi: the score is ``agent_return_mean`` (every player gets the score's change).
MAgent2 battle (the red team trains, blue plays uniformly random actions): per
evaluation episode, red's kills (blue agents that died), red's losses, and a win when
red killed more than it lost.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
import ray
from run_csv import finished_run, window_mean

from marllib_ext import algos, make_env
from marllib_ext.algos.api import progress_row
from marllib_ext.cli import parse_assignments

WINDOW = 5
SETTINGS = {"mappo": {}, "ippo": {}}


def random_legal(env, rng):
    def act(agent, obs):
        if isinstance(obs, dict):
            return int(rng.choice(np.flatnonzero(obs["action_mask"])))
        return int(rng.integers(env.action_space[agent].n))

    return act


def play(handle, policy, episodes: int, seed: int) -> dict[str, float]:
    """Mean score per agent, and for battles red's kills, losses and win rate."""
    env = handle.make_rllib_env()
    scores, kills, losses, wins = [], [], [], []
    for episode in range(episodes):
        observations, _ = env.reset(seed=seed + episode)
        total, dead = 0.0, set()
        while True:
            actions = {a: policy(a, o) for a, o in observations.items() if a in env.par_env.agents}
            observations, rewards, terminateds, truncateds, _ = env.step(actions)
            total += float(sum(rewards.values()))
            dead |= {a for a, done in terminateds.items() if done and a != "__all__"}
            if terminateds["__all__"] or truncateds["__all__"]:
                break
        scores.append(total / len(handle.layout.agents))
        opponent = env.par_env
        while opponent is not None and not hasattr(opponent, "opponents_dead"):
            opponent = getattr(opponent, "env", None)
        if opponent is not None:  # a battle against a fixed team: red's kills and losses
            kills.append(len(opponent.opponents_dead))
            losses.append(len(dead))
            wins.append(kills[-1] > losses[-1])
    out = {"score": float(np.mean(scores))}
    if kills:
        out.update(kills=float(np.mean(kills)), losses=float(np.mean(losses)),
                   win_rate=float(np.mean(wins)))  # fmt: skip
    return out


def checkpoint_of(path: Path) -> Path:
    """Where a run's final checkpoint goes (``runs/``, not committed)."""
    return Path("runs") / "come_and_go" / path.parent.parent.name / path.parent.name / path.stem


def train(label: str, handle, seed: int, steps: int, path: Path, overrides: dict) -> None:
    if finished_run(path, steps):
        return
    algo = (
        algos.get(label, **{**SETTINGS[label], **overrides})
        .rllib_config(handle, share_policy="group", seed=seed)
        .build_algo()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["timesteps_total", "agent_return_mean"])
        done = 0
        while done < steps:
            row = progress_row(algo.train())
            done = int(row["timesteps_total"])
            writer.writerow([done, row["agent_return_mean"]])
            f.flush()
    algo.save_to_path(str(checkpoint_of(path).resolve()))
    algo.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--env-arg", nargs="*", default=[])
    parser.add_argument("--labels", nargs="+", default=["mappo", "ippo"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--episodes", type=int, default=50, help="evaluation episodes")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/come_and_go"))
    parser.add_argument("--report", action="store_true")
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="e.g. num_env_runners=0"
    )
    args = parser.parse_args()
    overrides = parse_assignments(args.set, "--set")
    handle = make_env(args.task, **parse_assignments(args.env_arg, "--env-arg"))
    root = args.out / args.task.replace(":", "-")
    if not args.report:
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
        for label in args.labels:
            for seed in args.seeds:
                train(label, handle, seed, args.steps, root / label / f"seed{seed}.csv", overrides)
                print(f"{label} seed {seed}: done", flush=True)
        return
    baseline = play(handle, random_legal(handle.make_rllib_env(), np.random.default_rng(0)),
                    args.episodes, 10_000)  # fmt: skip
    print(f"| team | env steps | training return (last {WINDOW} iterations) | evaluated score "
          f"| {' | '.join(k for k in baseline if k != 'score')} |")  # fmt: skip
    print(f"| random (legal moves) | 0 | - | {baseline['score']:.3f} | "
          + " | ".join(f"{v:.2f}" for k, v in baseline.items() if k != "score") + " |")  # fmt: skip
    for label in args.labels:
        finals, evaluations = [], []
        for seed in args.seeds:
            path = root / label / f"seed{seed}.csv"
            rows = finished_run(path, args.steps)
            if not rows:
                continue
            finals.append(window_mean(rows, "agent_return_mean", WINDOW))
            checkpoint = checkpoint_of(path)
            if checkpoint.exists():
                from marllib_ext.envs.magent import checkpoint_policy

                evaluations.append(play(handle, checkpoint_policy(str(checkpoint.resolve()), seed),
                                        args.episodes, 10_000))  # fmt: skip
        if not finals:
            continue
        extra = ""
        if evaluations:
            keys = list(evaluations[0])
            extra = " | " + " | ".join(
                f"{np.mean([e[k] for e in evaluations]):.2f} ± "
                f"{np.std([e[k] for e in evaluations]):.2f}"
                for k in keys
            )
        print(f"| {label} ({len(finals)} seeds) | {args.steps} | {np.mean(finals):.3f} ± "
              f"{np.std(finals):.3f}{extra} |")  # fmt: skip


if __name__ == "__main__":
    main()
