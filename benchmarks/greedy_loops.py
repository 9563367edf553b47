"""Where a trained team's greedy episodes fall short: deterministic loops.

    python benchmarks/greedy_loops.py RUN_DIR [RUN_DIR ...] --episodes 100

Each ``RUN_DIR`` holds a ``fit`` run (``checkpoint/``, directly or one level down). Its
checkpoint plays ``--episodes`` greedy episodes (no exploration, one env). A greedy team
of feed-forward agents on a fully observed deterministic task (LBF) acts as a function
of the state: once a joint observation comes back (``ops.loops.first_repeat``), the
episode cycles to its step limit. Per run: the greedy team return, the share of
episodes that loop, the return of looping and of other episodes, the loops' periods
their most common joint actions (LBF's names: ``.`` none, ``^ v < >`` moves, ``L``
load), and the median gap between each agent's best and second-best Q value on the
states inside the loops against the other visited states (feed-forward agents).

``--masked`` (LBF, feed-forward agents) replays the same greedy policy on one set of
layouts twice: as trained, and with LBF's legal actions masked at test time only
(``envs.tuple_agents`` ``action_masks``): how much of the shortfall comes from moves
into walls or food and loads with no food beside the agent.
"""

from __future__ import annotations

import collections
import warnings
from pathlib import Path

import common
import numpy as np
import ray
import torch

from marllib_ext.algos.restore import restored_algorithm
from marllib_ext.envs.adapter import OBSERVATION_KEY
from marllib_ext.envs.agent_inputs import AGENT_ID_ARG, LAST_ACTION_ARG, agent_input_features
from marllib_ext.envs.tuple_agents import make_tuple_agents_env
from marllib_ext.ops.joint_q import action_gaps
from marllib_ext.ops.loops import first_repeat, state_keys

LBF_ACTIONS = ".^v<>L"


def checkpoint_of(run_dir: Path) -> Path:
    for candidate in (run_dir / "checkpoint", *sorted(run_dir.glob("*/checkpoint"))):
        if candidate.is_dir():
            return candidate
    raise SystemExit(f"{run_dir}: no checkpoint/ in it or one level down")


def plain(observations) -> np.ndarray:
    """An agent's observations without their action masks (masked envs hand dicts)."""
    if isinstance(observations, dict):
        observations = observations[OBSERVATION_KEY]
    elif len(observations) and isinstance(observations[0], dict):
        observations = [step[OBSERVATION_KEY] for step in observations]
    return np.asarray(observations, np.float32)


def joint_observations(episode) -> tuple[np.ndarray, np.ndarray]:
    """``(T + 1, n, d)`` observations and ``(T, n)`` actions of every agent (all act at
    every step, as in LBF)."""
    agents = sorted(episode.agent_episodes)
    obs = [plain(episode.agent_episodes[a].get_observations()) for a in agents]
    actions = [np.asarray(episode.agent_episodes[a].get_actions()) for a in agents]
    return np.stack(obs, axis=1), np.stack(actions, axis=1)


def module_of(algorithm, agent: str):
    """The env runner's module that acts for ``agent`` (the run's policy mapping)."""
    return algorithm.env_runner.module[algorithm.config.policy_mapping_fn(agent, None)]


def agent_action_gaps(algorithm, obs: np.ndarray) -> np.ndarray:
    """``(T + 1, n, d)`` joint observations -> ``(T + 1, n)`` gaps between each agent's
    best and second-best Q value (feed-forward agents; NaN for GRU agents)."""
    gaps = np.full(obs.shape[:2], np.nan)
    for i, agent in enumerate(f"agent_{k}" for k in range(obs.shape[1])):
        module = module_of(algorithm, agent)
        if module.model_config.get("use_rnn"):
            return gaps
        with torch.no_grad():
            gaps[:, i] = action_gaps(module.net(torch.as_tensor(obs[:, i]))).numpy()
    return gaps


def loop_report(episodes, algorithm) -> dict:
    returns, looped, periods, cycles = [], [], collections.Counter(), collections.Counter()
    gaps_in_loops, gaps_elsewhere = [], []
    for episode in episodes:
        obs, actions = joint_observations(episode)
        gaps = agent_action_gaps(algorithm, obs)
        returns.append(float(episode.get_return()))
        repeat = first_repeat(state_keys(obs))
        looped.append(repeat is not None)
        in_loop = np.zeros(len(obs), bool)
        if repeat is not None:
            start, period = repeat
            in_loop[start : start + period] = True
            periods[period] += 1
            cycle = {
                "".join(LBF_ACTIONS[int(a)] if a < len(LBF_ACTIONS) else "?" for a in row)
                for row in actions[start : start + period]
            }
            cycles[" ".join(sorted(cycle))] += 1
        gaps_in_loops.append(gaps[in_loop])
        gaps_elsewhere.append(gaps[~in_loop])
    returns, looped = np.array(returns), np.array(looped)
    return {
        "return": returns.mean(),
        "loops": looped.mean(),
        "return_looping": returns[looped].mean() if looped.any() else np.nan,
        "return_other": returns[~looped].mean() if (~looped).any() else np.nan,
        "periods": dict(sorted(periods.items())),
        "cycles": cycles.most_common(4),
        "gap_loops": np.median(np.concatenate(gaps_in_loops)) if looped.any() else np.nan,
        "gap_other": np.median(np.concatenate(gaps_elsewhere)),
    }


def replayed_greedy_return(
    algorithm, episodes: int, *, masked: bool, seed: int = 10_000
) -> tuple[float, float]:
    """The checkpoint's greedy feed-forward agents on LBF, on the layouts of env seeds
    ``seed, seed + 1, ...``; ``masked``: with LBF's legal actions masked at test time.
    Returns (mean team return, share of looping episodes)."""
    env_args = dict(algorithm.config.env_config)
    family, _, task = str(algorithm.config.env).rpartition("/")[2].partition(":")
    if family != "lbf" or env_args.get(LAST_ACTION_ARG):
        raise SystemExit("--masked replays LBF runs whose agents read no last action")
    env = make_tuple_agents_env("lbf", task, action_masks=True)
    agents = env.possible_agents
    modules = {agent: module_of(algorithm, agent) for agent in agents}
    if any(m.model_config.get("use_rnn") for m in modules.values()):
        raise SystemExit("--masked replays feed-forward agents only")
    with_id = bool(env_args.get(AGENT_ID_ARG))
    returns, loops = [], 0
    for index in range(episodes):
        observations, infos = env.reset(seed=seed + index)
        visited, total = [], 0.0
        while env.agents:
            visited.append(np.stack([observations[a] for a in agents]))
            actions = {}
            for i, agent in enumerate(agents):
                features = agent_input_features(i, len(agents) if with_id else 0, None, None)
                x = np.concatenate([observations[agent].astype(np.float32), features])
                q = modules[agent].net(torch.as_tensor(x)[None])[0].detach().numpy()
                if masked:
                    q = np.where(infos[agent]["action_mask"] > 0, q, -np.inf)
                actions[agent] = int(q.argmax())
            observations, rewards, _, _, infos = env.step(actions)
            total += sum(rewards.values())
        returns.append(total)
        loops += first_repeat(state_keys(np.stack(visited))) is not None
    return float(np.mean(returns)), loops / episodes


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--masked", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    common.start_ray(num_cpus=1)
    print(
        "| run | greedy return | episodes that loop | return: looping / other | periods | "
        "most common loops (joint actions) | median Q gap: in loops / elsewhere |"
        + (" same layouts, unmasked / masked: return (loops) |" if args.masked else "")
    )
    print("|---|---|---|---|---|---|---|" + ("---|" if args.masked else ""))
    try:
        for run_dir in args.runs:
            with restored_algorithm(checkpoint_of(run_dir)) as algorithm:
                episodes = algorithm.env_runner.sample(
                    num_episodes=args.episodes, explore=False, force_reset=True
                )
                report = loop_report(episodes[: args.episodes], algorithm)
                replayed = [
                    replayed_greedy_return(algorithm, args.episodes, masked=masked)
                    for masked in ((False, True) if args.masked else ())
                ]
            cycles = ", ".join(f"`{c}` {n}" for c, n in report["cycles"])
            row = (
                f"| {run_dir} | {report['return']:.2f} | {report['loops']:.2f} | "
                f"{report['return_looping']:.2f} / {report['return_other']:.2f} | "
                f"{report['periods']} | {cycles} | "
                f"{report['gap_loops']:.3f} / {report['gap_other']:.3f} |"
            )
            if replayed:
                (plain, plain_loops), (masked, masked_loops) = replayed
                row += f" {plain:.2f} ({plain_loops:.2f}) / {masked:.2f} ({masked_loops:.2f}) |"
            print(row, flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
