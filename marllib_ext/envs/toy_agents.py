"""Small envs whose agents have illegal moves, come and go, or take turns (tests of
action masks, absent agents and turn-taking)."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import AECEnv, ParallelEnv


class LegalMovesEnv(ParallelEnv):
    """The coordination game with illegal moves (action masks).

    Every step each agent may play only ``n_legal`` of the ``n_targets`` actions (a
    fresh random subset per agent, the shared target always among them), given by its
    ``action_mask``: in a dict observation ``{"observation", "action_mask"}``
    (PettingZoo's convention, ``mask_in="observation"``) or in ``info["action_mask"]``
    (``mask_in="info"``). Playing an illegal action raises ``ValueError``. Each agent
    receives 1.0 when all agents pick the target. A random legal team scores
    ``episode_length / n_legal**n_agents`` per agent.

    ``empty_mask_at``: env step at which ``agent_0`` gets an all-zero mask (tests of the
    error); ``None`` for never.
    """

    metadata = {"name": "legal_moves_v0", "render_modes": []}

    def __init__(
        self,
        n_agents: int = 2,
        n_targets: int = 5,
        n_legal: int = 2,
        episode_length: int = 10,
        mask_in: str = "observation",
        empty_mask_at: int | None = None,
    ) -> None:
        if not 1 <= n_legal <= n_targets or n_agents < 1 or episode_length < 1:
            raise ValueError("need n_agents >= 1, 1 <= n_legal <= n_targets, episode_length >= 1")
        if mask_in not in ("observation", "info"):
            raise ValueError(f"mask_in must be 'observation' or 'info', got {mask_in!r}")
        self.n_targets, self.n_legal = n_targets, n_legal
        self.episode_length = episode_length
        self.mask_in, self.empty_mask_at = mask_in, empty_mask_at
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        plain = spaces.Box(0.0, 1.0, (n_targets + 1,), np.float32)
        mask = spaces.Box(0, 1, (n_targets,), np.int8)
        self._observation_space = (
            spaces.Dict({"observation": plain, "action_mask": mask})
            if mask_in == "observation"
            else plain
        )
        self._action_space = spaces.Discrete(n_targets)
        self._rng = np.random.default_rng()
        self._target, self._t = 0, 0
        self.masks: dict[str, np.ndarray] = {}

    def observation_space(self, agent: str):
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def state(self) -> np.ndarray:
        obs = np.zeros(self.n_targets + 1, np.float32)
        obs[self._target] = 1.0
        obs[-1] = 1.0 - self._t / self.episode_length
        return obs

    def _draw(self) -> None:
        self._target = int(self._rng.integers(self.n_targets))
        self.masks = {}
        for agent in self.possible_agents:
            others = np.delete(np.arange(self.n_targets), self._target)
            legal = [self._target, *self._rng.choice(others, self.n_legal - 1, replace=False)]
            mask = np.zeros(self.n_targets, np.int8)
            mask[legal] = 1
            if agent == "agent_0" and self._t == self.empty_mask_at:
                mask[:] = 0
            self.masks[agent] = mask

    def _observe(self, agents) -> tuple[dict, dict]:
        obs = self.state()
        if self.mask_in == "observation":
            observations = {
                a: {"observation": obs.copy(), "action_mask": self.masks[a]} for a in agents
            }
            return observations, {a: {} for a in agents}
        return {a: obs.copy() for a in agents}, {a: {"action_mask": self.masks[a]} for a in agents}

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._draw()
        return self._observe(self.agents)

    def step(self, actions: dict[str, int]):
        for agent in self.agents:
            if not self.masks[agent][int(actions[agent])]:
                raise ValueError(
                    f"agent {agent!r} played illegal action {int(actions[agent])} at step "
                    f"{self._t} (legal: {np.flatnonzero(self.masks[agent]).tolist()})"
                )
        matched = all(int(actions[a]) == self._target for a in self.agents)
        reward = 1.0 if matched else 0.0
        self._t += 1
        self._draw()
        truncated = self._t >= self.episode_length
        agents = self.agents
        observations, infos = self._observe(agents)
        if truncated:
            self.agents = []
        return (
            observations,
            {a: reward for a in agents},
            {a: False for a in agents},
            {a: truncated for a in agents},
            infos,
        )


def legal_moves_env(**kwargs) -> LegalMovesEnv:
    return LegalMovesEnv(**kwargs)


class ComeAndGoEnv(ParallelEnv):
    """Agents that arrive late and die early, on a script (tests of absent agents).

    ``agent_0`` plays the whole episode; ``agent_1`` dies after acting at env step
    ``death_step`` (its own termination; the episode goes on); ``agent_2`` arrives with
    its first observation at env step ``arrival_step``. With ``all_die_at`` every agent
    still alive terminates after acting at that step (the episode ends terminated);
    otherwise the episode is truncated after ``episode_length`` steps.

    Every step an agent that plays ``t % 2`` gets 1.0, else 0.0 (with
    ``continuous_actions``, an action in ``[-1, 1]`` gets ``1 - |a - (2 (t % 2) - 1)| / 2``),
    and its observation is ``[t / episode_length, t % 2, one_hot(agent index)]``. With
    ``costs``, an agent's info carries ``cost`` 1.0 for every reward it earns (safe
    MARL). ``state()`` is
    ``[t / episode_length, t % 2, present_0, present_1, present_2]``: fixed slots for
    ``possible_agents`` with the alive mask.
    """

    metadata = {"name": "come_and_go_v0", "render_modes": []}

    def __init__(
        self,
        episode_length: int = 8,
        death_step: int | None = 3,
        arrival_step: int | None = 2,
        all_die_at: int | None = None,
        continuous_actions: bool = False,
        costs: bool = False,
    ) -> None:
        if episode_length < 2:
            raise ValueError("episode_length must be >= 2")
        self.episode_length = episode_length
        self.death_step, self.arrival_step, self.all_die_at = death_step, arrival_step, all_die_at
        self.possible_agents = ["agent_0", "agent_1", "agent_2"]
        self.agents: list[str] = []
        self._observation_space = spaces.Box(0.0, 1.0, (5,), np.float32)
        self.continuous_actions, self.costs = continuous_actions, costs
        self._action_space = (
            spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous_actions else spaces.Discrete(2)
        )
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_space

    def action_space(self, agent: str):
        return self._action_space

    def _reward(self, action) -> float:
        if self.continuous_actions:
            target = 2.0 * (self._t % 2) - 1.0
            return 1.0 - abs(float(np.clip(np.asarray(action).reshape(-1)[0], -1, 1)) - target) / 2
        return float(int(action) == self._t % 2)

    def _observation(self, agent: str) -> np.ndarray:
        obs = np.zeros(5, np.float32)
        obs[0], obs[1] = self._t / self.episode_length, self._t % 2
        obs[2 + self.possible_agents.index(agent)] = 1.0
        return obs

    def state(self) -> np.ndarray:
        present = [float(a in self.agents) for a in self.possible_agents]
        return np.array([self._t / self.episode_length, self._t % 2, *present], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None):
        self._t = 0
        self.agents = ["agent_0", "agent_1"]
        if self.arrival_step in (None, 0):
            self.agents.append("agent_2")
        return {a: self._observation(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, int]):
        acting = list(self.agents)
        missing = set(acting) - set(actions)
        if missing or set(actions) - set(acting):
            raise ValueError(f"step {self._t}: actions for {sorted(actions)}, acting {acting}")
        rewards = {a: self._reward(actions[a]) for a in acting}
        dying = set()
        if self._t == self.death_step and "agent_1" in acting:
            dying.add("agent_1")
        if self._t == self.all_die_at:
            dying = set(acting)
        self._t += 1
        truncated = self._t >= self.episode_length
        self.agents = [a for a in acting if a not in dying and not truncated]
        arriving = (
            ["agent_2"]
            if self._t == self.arrival_step and not truncated and not dying >= set(acting)
            else []
        )
        self.agents += arriving
        observed = acting + arriving
        infos = {a: {"cost": rewards[a]} if self.costs and a in rewards else {} for a in observed}
        return (
            {a: self._observation(a) for a in observed},
            {**rewards, **{a: 0.0 for a in arriving}},
            {a: a in dying for a in observed},
            {a: truncated and a not in dying for a in observed},
            infos,
        )


def come_and_go_env(**kwargs) -> ComeAndGoEnv:
    return ComeAndGoEnv(**kwargs)


class TakeTurnsEnv(AECEnv):
    """A turn-taking (AEC) cooperative game with masks, for tests without extras.

    Players ``player_0``, ``player_1``, ... move in turn for ``rounds`` rounds. The player
    to move sees ``[one_hot(target), share of the game left]`` and may play only ``n_legal``
    of ``n_targets`` actions (the target always among them, ``action_mask`` in a dict
    observation). Playing the target gives every player 1.0 (the team's score).
    """

    metadata = {"name": "take_turns_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self, players: int = 2, n_targets: int = 4, n_legal: int = 2, rounds: int = 4):
        super().__init__()
        self.possible_agents = [f"player_{i}" for i in range(players)]
        self.n_targets, self.n_legal, self.turns = n_targets, n_legal, rounds * players
        plain = spaces.Box(0.0, 1.0, (n_targets + 1,), np.float32)
        mask = spaces.Box(0, 1, (n_targets,), np.int8)
        self._observation_space = spaces.Dict({"observation": plain, "action_mask": mask})
        self._action_space = spaces.Discrete(n_targets)
        self._rng = np.random.default_rng()

    def observation_space(self, agent):
        return self._observation_space

    def action_space(self, agent):
        return self._action_space

    def _draw(self) -> None:
        self._target = int(self._rng.integers(self.n_targets))
        others = np.delete(np.arange(self.n_targets), self._target)
        legal = [self._target, *self._rng.choice(others, self.n_legal - 1, replace=False)]
        self._mask = np.zeros(self.n_targets, np.int8)
        self._mask[legal] = 1

    def observe(self, agent):
        obs = np.zeros(self.n_targets + 1, np.float32)
        obs[self._target] = 1.0
        obs[-1] = 1.0 - self._turn / self.turns
        mask = self._mask if agent == self.agent_selection else np.zeros_like(self._mask)
        return {"observation": obs, "action_mask": mask.copy()}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self._turn = 0
        self.agent_selection = self.agents[0]
        self._draw()

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if not self._mask[int(action)]:
            raise ValueError(f"{agent!r} played illegal action {int(action)} at turn {self._turn}")
        self._cumulative_rewards[agent] = 0.0
        score = 1.0 if int(action) == self._target else 0.0
        self.rewards = {a: score for a in self.agents}
        self._turn += 1
        if self._turn >= self.turns:
            self.truncations = {a: True for a in self.agents}
        self.agent_selection = self.agents[self._turn % len(self.agents)]
        self._draw()
        self._accumulate_rewards()


def take_turns_env(**kwargs) -> TakeTurnsEnv:
    return TakeTurnsEnv(**kwargs)
