"""Success rate of a uniformly random team: the yardstick for sizing sparse tasks.

Success is a positive team return in the episode, as in ``efx_evidence.py``.

    python benchmarks/random_team.py --task grid:pass --env-arg size=5 max_steps=125
"""

from __future__ import annotations

import common

from marllib_ext import make_env
from marllib_ext.cli import parse_assignments


def random_team_success(
    task: str, env_args: dict, episodes: int, seed: int
) -> tuple[float, float, dict[str, float]]:
    """``(success rate, mean return of all agents, mean return per team)`` of uniformly
    random actions."""
    handle = make_env(task, **env_args)
    team_of = handle.layout.team_of
    env = handle.make_rllib_env()
    for offset, agent in enumerate(env.possible_agents):
        env.get_action_space(agent).seed(seed + offset)
    successes, returns = 0, []
    per_team = dict.fromkeys(set(team_of.values()), 0.0)
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        team_return, done = 0.0, False
        while not done:
            actions = {agent: env.get_action_space(agent).sample() for agent in env.agents}
            _, rewards, terminated, truncated, _ = env.step(actions)
            team_return += float(sum(rewards.values()))
            for agent, reward in rewards.items():
                per_team[team_of[agent]] += float(reward) / episodes
            done = terminated["__all__"] or truncated["__all__"]
        successes += team_return > 0
        returns.append(team_return)
    return successes / episodes, sum(returns) / episodes, per_team


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--task", default="grid:pass")
    parser.add_argument("--env-arg", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rate, mean_return, per_team = random_team_success(
        args.task, parse_assignments(args.env_arg, "--env-arg"), args.episodes, args.seed
    )
    print(
        f"{args.task} {' '.join(args.env_arg)}: random team succeeds in "
        f"{rate:.2%} of {args.episodes} episodes, mean team return {mean_return:.3f}"
    )
    if len(per_team) > 1:
        print("per team: " + ", ".join(f"{t} {r:.3f}" for t, r in sorted(per_team.items())))


if __name__ == "__main__":
    main()
