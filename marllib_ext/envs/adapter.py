"""PettingZoo ParallelEnv -> RLlib MultiAgentEnv, with the global state in every info."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
from ray.rllib.utils.annotations import override

STATE_KEY = "state"
# Per-agent cost reported by the env (safe MARL), and the team's sum added here.
COST_KEY = "cost"
TEAM_COST_KEY = "team_cost"
STATE_SOURCES = ("auto", "env", "observations")


def _env_has_state(env: ParallelEnv) -> bool:
    try:
        env.state()
    except (NotImplementedError, AttributeError):
        return False
    return True


# info entry of the step where an agent got a non-finite reward (the episode ends there).
NONFINITE_REWARD_KEY = "nonfinite_reward"


class ParallelEnvAdapter(ParallelPettingZooEnv):
    """RLlib's ``ParallelPettingZooEnv`` that also reports the global state.

    Every agent's info dict carries ``info["state"]``: ``env.state()`` when the env
    implements it (``state_source="env"``, or ``"auto"``), else all agents'
    flattened observations concatenated in sorted agent-id order
    (``state_source="observations"``). Critics on the learner read it from the
    episodes, so the actors never see it.

    When the env reports a per-agent cost in ``info["cost"]``, every agent's info also
    gets ``info["team_cost"]``, the sum over the agents of its team (``team_of``; one
    team by default) that reported one (non-finite or non-numeric costs raise a
    ``ValueError`` naming the agent).

    Agents must stay alive until the episode ends (MARLlib's convention for its
    cooperative envs): the centralized critic aligns agents by env step.
    """

    def __init__(
        self,
        env: ParallelEnv,
        *,
        state_source: str = "auto",
        env_name: str | None = None,
        team_of: Mapping[str, str] | None = None,
    ) -> None:
        if state_source not in STATE_SOURCES:
            raise ValueError(f"state_source must be one of {STATE_SOURCES}, got {state_source!r}")
        super().__init__(env)
        self._sorted_agents = sorted(self.par_env.possible_agents)
        if state_source == "auto":
            state_source = "env" if _env_has_state(self.par_env) else "observations"
        elif state_source == "env" and not _env_has_state(self.par_env):
            raise ValueError(f"state_source='env' but {type(env).__name__} has no state()")
        self.state_source = state_source
        self.state_space = self._build_state_space()
        self.env_name = env_name or type(env).__name__
        self.team_of = dict(team_of or {})
        self.env_t = 0

    def _build_state_space(self) -> gym.spaces.Box:
        if self.state_source == "env":
            dim = int(np.prod(np.shape(self.par_env.state())))
        else:
            dim = sum(
                gym.spaces.flatdim(self.par_env.observation_space(agent))
                for agent in self._sorted_agents
            )
        return gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)

    def _global_state(self, observations: dict[str, Any]) -> np.ndarray:
        if self.state_source == "env":
            return np.asarray(self.par_env.state(), dtype=np.float32).reshape(-1)
        parts = []
        for agent in self._sorted_agents:
            space = self.par_env.observation_space(agent)
            if agent in observations:
                parts.append(gym.spaces.flatten(space, observations[agent]))
            else:
                parts.append(np.zeros(gym.spaces.flatdim(space), np.float32))
        return np.concatenate(parts).astype(np.float32)

    def _add_state(self, observations: dict[str, Any], infos: dict[str, Any]) -> dict[str, Any]:
        state = self._global_state(observations)
        infos = dict(infos or {})
        costs = {a: info[COST_KEY] for a, info in infos.items() if COST_KEY in (info or {})}
        cost_of_team = {}
        if costs:
            by_team: dict[str, dict[str, Any]] = {}
            for agent, cost in costs.items():
                by_team.setdefault(self.team_of.get(agent), {})[agent] = cost
            cost_of_team = {team: team_cost(team_costs) for team, team_costs in by_team.items()}
        for agent in observations:
            extra = {STATE_KEY: state}
            if costs:
                extra[TEAM_COST_KEY] = cost_of_team.get(self.team_of.get(agent), 0.0)
            infos[agent] = {**infos.get(agent, {}), **extra}
        return infos

    @override(ParallelPettingZooEnv)
    def render(self):
        # RLlib's wrapper passes render_mode positionally; PettingZoo's render() takes none.
        return self.par_env.render()

    @override(ParallelPettingZooEnv)
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observations, infos = super().reset(seed=seed, options=options)
        self.env_t = 0
        return observations, self._add_state(observations, infos)

    @override(ParallelPettingZooEnv)
    def step(self, action_dict):
        observations, rewards, terminateds, truncateds, infos = self.par_env.step(action_dict)
        bad = [agent for agent, reward in rewards.items() if not np.isfinite(reward)]
        if bad:
            # End the episode here; the report travels in the infos to the driver, which
            # stops training with an error naming the env, the agent and the step
            # (an exception in a remote env runner would only restart the runner).
            report = {
                "agent_index": self._sorted_agents.index(bad[0]),
                "env_step": self.env_t,
                "reward": float(rewards[bad[0]]),
            }
            rewards = {a: 0.0 if a in bad else r for a, r in rewards.items()}
            terminateds = {a: False for a in rewards}
            truncateds = {a: True for a in rewards}
            infos = {a: {**(infos.get(a) or {}), NONFINITE_REWARD_KEY: report} for a in rewards}
        self.env_t += 1
        terminateds, truncateds = episode_end_flags(terminateds, truncateds)
        return observations, rewards, terminateds, truncateds, self._add_state(observations, infos)


def episode_end_flags(
    terminateds: dict[str, bool], truncateds: dict[str, bool]
) -> tuple[dict[str, bool], dict[str, bool]]:
    """PettingZoo per-agent flags -> RLlib flags with the right ``__all__`` entries.

    RLlib 2.60's ``MultiAgentEpisode`` declares an episode *terminated* whenever every
    agent id appears done in the flag dicts, even when all were only truncated (a time
    limit), which would stop GAE from bootstrapping. When every agent is done and not
    all terminated, the episode is reported truncated through ``__all__`` only, keeping
    per-agent ``True`` entries just for agents that really terminated.
    """
    agents = set(terminateds) | set(truncateds)
    all_terminated = bool(agents) and all(terminateds.get(a, False) for a in agents)
    all_done = bool(agents) and all(
        terminateds.get(a, False) or truncateds.get(a, False) for a in agents
    )
    if all_done and not all_terminated:
        kept = {a: True for a in agents if terminateds.get(a, False)}
        return {**kept, "__all__": False}, {"__all__": True}
    return (
        {**terminateds, "__all__": all_terminated},
        {**truncateds, "__all__": all_done and not all_terminated},
    )


def team_cost(costs: dict[str, Any]) -> float:
    """Sum of the agents' ``info["cost"]``; a clear error for a non-finite cost."""
    total = 0.0
    for agent, cost in costs.items():
        try:
            value = float(cost)
        except (TypeError, ValueError) as e:
            raise ValueError(f"info['cost'] of agent {agent!r} is not a number: {cost!r}") from e
        if not np.isfinite(value):
            raise ValueError(f"info['cost'] of agent {agent!r} is {value}; costs must be finite")
        total += value
    return total
