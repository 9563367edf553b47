"""Turn-taking (AEC) PettingZoo envs as parallel envs where only the agent to act
observes: every other agent is absent from that step.

At each step the facade hands back the observation of the agent whose turn it is
(``agent_selection``) and every agent's reward of that step; RLlib credits a reward
to the agent's last action until it observes again, so an agent's row carries the
rewards of the whole round after its move. When the game ends, every agent left gets
its final observation with its termination or truncation.
"""

from __future__ import annotations

from typing import Any

from pettingzoo.utils.env import AECEnv, ParallelEnv


class TurnBasedParallelEnv(ParallelEnv):
    """A PettingZoo ``AECEnv`` behind the parallel API, one agent observing per step."""

    def __init__(self, env: AECEnv) -> None:
        self.aec_env = env
        self.possible_agents = list(env.possible_agents)
        self.agents: list[str] = []
        self.metadata = getattr(env, "metadata", {})
        self.render_mode = getattr(env, "render_mode", None)

    @property
    def unwrapped(self):
        return self.aec_env.unwrapped

    def observation_space(self, agent: str):
        return self.aec_env.observation_space(agent)

    def action_space(self, agent: str):
        return self.aec_env.action_space(agent)

    def state(self):
        return self.aec_env.state()

    def render(self):
        return self.aec_env.render()

    def close(self) -> None:
        self.aec_env.close()

    def _done(self, agent: str) -> bool:
        return bool(self.aec_env.terminations[agent] or self.aec_env.truncations[agent])

    def _finals(self) -> dict[str, tuple[Any, bool, bool, dict]]:
        """Steps the done agents out (``step(None)``, as AEC requires) until a live agent
        is to act or none is left; their final observations and flags."""
        env, finals = self.aec_env, {}
        while env.agents and self._done(env.agent_selection):
            agent = env.agent_selection
            finals[agent] = (
                env.observe(agent),
                bool(env.terminations[agent]),
                bool(env.truncations[agent]),
                dict(env.infos[agent]),
            )
            env.step(None)
        return finals

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.aec_env.reset(seed=seed, options=options)
        self._finals()
        agent = self.aec_env.agent_selection
        self.agents = list(self.aec_env.agents)
        return {agent: self.aec_env.observe(agent)}, {agent: dict(self.aec_env.infos[agent])}

    def step(self, actions: dict[str, Any]):
        env = self.aec_env
        agent = env.agent_selection
        if set(actions) != {agent}:
            raise ValueError(f"it is {agent!r}'s turn; got actions for {sorted(actions)}")
        env.step(actions[agent])
        rewards = {a: float(r) for a, r in env.rewards.items()}
        finals = self._finals()
        observations, terminations, truncations, infos = {}, {}, {}, {}
        for done_agent, (obs, terminated, truncated, info) in finals.items():
            observations[done_agent] = obs
            terminations[done_agent], truncations[done_agent] = terminated, truncated
            infos[done_agent] = info
        if env.agents:
            nxt = env.agent_selection
            observations[nxt] = env.observe(nxt)
            terminations[nxt], truncations[nxt] = False, False
            infos[nxt] = dict(env.infos[nxt])
        self.agents = list(env.agents)
        # Agents that ended this step and were not stepped out yet (the game ended with
        # someone else's move) get their final observation too.
        for a in rewards:
            if a not in observations and a in env.terminations and self._done(a):
                observations[a] = env.observe(a)
                terminations[a] = bool(env.terminations[a])
                truncations[a] = bool(env.truncations[a])
                infos[a] = dict(env.infos.get(a, {}))
        return observations, rewards, terminations, truncations, infos
