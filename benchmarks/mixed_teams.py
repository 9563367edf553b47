"""Learning per team: each team's return, first iterations vs last, per seed, and the
env steps per second through RLlib.

Default: ``mappo`` with ``share_policy=group`` on ``mpe:simple_tag`` (3 adversaries
chase 1 good agent; one joint critic per team). Writes
``<out>/<env>/<algo>_seed<k>.csv`` as it goes.

    python benchmarks/mixed_teams.py --steps 100000 --seeds 0 1 2
    python benchmarks/mixed_teams.py --env lbf:Foraging-8x8-2p-2f-coop-v3 --steps 100000
    python benchmarks/mixed_teams.py --algo efx_mappo --steps 100000 --seeds 0
    python benchmarks/mixed_teams.py --env mamujoco:HalfCheetah --env-arg agent_conf=2x3 \
        --share-policy individual --steps 100000

Each team's return at given env steps, mean [min, max] over the seeds' CSVs (trains
nothing)::

    python benchmarks/mixed_teams.py --algo happo --env mpe:simple_speaker_listener \
        --seeds 0 1 2 --report-at 12000 20000 40000 100000
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np
import ray
import torch
from ray.rllib.core.columns import Columns
from run_csv import mean_at, read_run

from marllib_ext import algos, make_env
from marllib_ext.cli import parse_assignments


def team_returns(result: dict, teams: dict[str, tuple[str, ...]]) -> dict[str, float]:
    per_agent = result.get("env_runners", {}).get("agent_episode_returns_mean") or {}
    return {
        team: float(sum(per_agent.get(a, math.nan) for a in agents))
        for team, agents in teams.items()
    }


def mechanism_columns(result: dict, teams) -> dict[str, float]:
    """Per team, for EFX runs: the deployment budget and the fraction of rows where the
    conservative term binds; for safe runs: the team's episode cost and multiplier."""
    from marllib_ext.policies import critic_module_id

    columns = {}
    for team in teams:
        critic = result.get("learners", {}).get(critic_module_id(team), {})
        if "efx_binding_fraction" in critic:
            columns[f"{team}_efx_binding_fraction"] = float(critic["efx_binding_fraction"])
            efx_team = result.get("efx", {}).get("teams", {}).get(team, {})
            columns[f"{team}_budget_z"] = float(efx_team.get("budget_z", math.nan))
        safe_team = result.get("safe", {}).get("teams", {}).get(team)
        if safe_team:
            columns[f"{team}_episode_cost"] = float(safe_team["episode_cost_mean"])
            columns[f"{team}_cost_multiplier"] = float(safe_team["cost_multiplier"])
    return columns


def cross_play(algorithm, env, config, trained_team: str | None, episodes: int, seed: int):
    """Mean return per team when ``trained_team``'s agents act with their trained
    policies (sampled actions) and every other agent acts uniformly at random
    (``None``: every team random)."""
    rllib_env = env.make_rllib_env()
    teams = env.layout.team_of
    modules = {}
    totals = dict.fromkeys(set(teams.values()), 0.0)
    rng = np.random.default_rng(seed)
    for agent in rllib_env.possible_agents:
        rllib_env.get_action_space(agent).seed(int(rng.integers(1 << 30)))
    for episode in range(episodes):
        observations, _ = rllib_env.reset(seed=seed + episode)
        done = False
        while not done:
            actions = {}
            for agent, obs in observations.items():
                if teams[agent] != trained_team:
                    actions[agent] = rllib_env.get_action_space(agent).sample()
                    continue
                pid = config.policy_mapping_fn(agent, None)
                module = modules.setdefault(pid, algorithm.get_module(pid))
                with torch.no_grad():
                    out = module.forward_inference({Columns.OBS: torch.as_tensor(obs[None])})
                dist = module.get_inference_action_dist_cls().from_logits(
                    out[Columns.ACTION_DIST_INPUTS]
                )
                actions[agent] = dist.sample()[0].numpy()
            observations, rewards, terminated, truncated, _ = rllib_env.step(actions)
            for agent, reward in rewards.items():
                totals[teams[agent]] += float(reward) / episodes
            done = terminated["__all__"] or truncated["__all__"]
    return totals


def run(algo, env_name, env_args, share_policy, seed, steps, out, cross_episodes=0):
    env = make_env(env_name, **env_args)
    teams = env.layout.teams
    config = algos.get(algo).rllib_config(env, share_policy=share_policy, seed=seed)
    algorithm = config.build_algo()
    rows = []
    out.mkdir(parents=True, exist_ok=True)
    try:
        with open(out / f"{algo}_seed{seed}.csv", "w", newline="") as f:
            writer = None
            while True:
                result = algorithm.train()
                row = {
                    "timesteps_total": int(
                        result["env_runners"].get("num_env_steps_sampled_lifetime", 0)
                    ),
                    "time_total_s": float(result.get("time_total_s", math.nan)),
                    **team_returns(result, teams),
                }
                extra = mechanism_columns(result, teams)
                if writer is None:
                    writer = csv.DictWriter(f, fieldnames=[*row, *extra], restval=math.nan)
                    writer.writeheader()
                writer.writerow({**row, **extra})
                f.flush()
                rows.append(row)
                if row["timesteps_total"] >= steps:
                    break
        if cross_episodes and len(teams) > 1 and algos.get(algo).spec.capabilities.has_budget:
            print("  cross-play skipped: the actors of budget algorithms also need their z")
        elif cross_episodes and len(teams) > 1:
            for trained in [None, *teams]:
                totals = cross_play(algorithm, env, config, trained, cross_episodes, seed)
                label = "random vs random" if trained is None else f"trained {trained} only"
                print(
                    f"  seed {seed} cross-play, {label}: "
                    + ", ".join(f"{t} {r:.2f}" for t, r in sorted(totals.items())),
                    flush=True,
                )
        return rows
    finally:
        algorithm.stop()


def report(csv_dir: Path, algo: str, teams, seeds: list[int], at: list[int], window: int) -> None:
    """Per team and env-step count: the mean return over the ``window`` iterations ending
    at the first one that reached it, then mean [min, max] over seeds."""
    runs = [read_run(csv_dir / f"{algo}_seed{seed}.csv") for seed in seeds]
    for team in teams:
        cells = []
        for steps in at:
            values = [mean_at(rows, steps, team, window) for rows in runs]
            cells.append(f"{np.mean(values):.1f} [{min(values):.1f}, {max(values):.1f}]")
        print(f"| `{algo}` {team} ({len(runs)} seeds) | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="mappo")
    parser.add_argument("--env", default="mpe:simple_tag")
    parser.add_argument("--env-arg", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--share-policy", default="group")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--window", type=int, default=3, help="iterations averaged")
    parser.add_argument(
        "--cross-play",
        type=int,
        default=100,
        help="episodes per cross-play pairing (one team trained, the others random)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/mixed_teams"))
    parser.add_argument(
        "--report-at", type=int, nargs="+", default=None, help="env steps; trains nothing"
    )
    args = parser.parse_args()
    env_args = parse_assignments(args.env_arg, "--env-arg")
    if args.report_at:
        teams = make_env(args.env, **env_args).layout.teams
        csv_dir = args.out / args.env.replace(":", "-")
        report(csv_dir, args.algo, teams, args.seeds, args.report_at, args.window)
        return
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    summary = []
    for seed in args.seeds:
        rows = run(
            args.algo,
            args.env,
            env_args,
            args.share_policy,
            seed,
            args.steps,
            args.out / args.env.replace(":", "-"),
            args.cross_play,
        )
        teams = list(
            make_env(args.env, **parse_assignments(args.env_arg, "--env-arg")).layout.teams
        )
        first = {t: np.nanmean([r[t] for r in rows[: args.window]]) for t in teams}
        last = {t: np.nanmean([r[t] for r in rows[-args.window :]]) for t in teams}
        summary.append((seed, first, last))
        rate = rows[-1]["timesteps_total"] / rows[-1]["time_total_s"]
        print(
            f"seed {seed}: "
            + ", ".join(f"{t} {first[t]:.2f} -> {last[t]:.2f}" for t in teams)
            + f" ({rate:.0f} env steps/s)",
            flush=True,
        )
    for team in summary[0][1]:
        deltas = [last[team] - first[team] for _, first, last in summary]
        print(f"{team}: change {np.mean(deltas):+.2f} [{min(deltas):+.2f}, {max(deltas):+.2f}]")


if __name__ == "__main__":
    main()
