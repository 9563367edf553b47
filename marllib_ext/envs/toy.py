"""Small, fast cooperative PettingZoo envs for smoke and learning tests."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv


class CoordinationEnv(ParallelEnv):
    """Repeated coordination game.

    Every step all agents see the same random target out of ``n_targets`` (one-hot)
    and the fraction of the episode left. Each agent receives 1.0 when *all* agents
    pick the target action, else 0.0 (the team reward duplicated to every agent, as in
    MARLlib). A uniformly random team scores ``episode_length / n_targets**n_agents``
    per agent; a coordinated team scores ``episode_length``.
    """

    metadata = {"name": "coordination_v0", "render_modes": []}

    def __init__(self, n_agents: int = 2, n_targets: int = 3, episode_length: int = 10) -> None:
        if n_agents < 1 or n_targets < 2 or episode_length < 1:
            raise ValueError("need n_agents >= 1, n_targets >= 2, episode_length >= 1")
        self.n_targets = n_targets
        self.episode_length = episode_length
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        self._observation_space = spaces.Box(0.0, 1.0, (n_targets + 1,), np.float32)
        self._action_space = spaces.Discrete(n_targets)
        self._rng = np.random.default_rng()
        self._target = 0
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def _observation(self) -> np.ndarray:
        obs = np.zeros(self.n_targets + 1, np.float32)
        obs[self._target] = 1.0
        obs[-1] = 1.0 - self._t / self.episode_length
        return obs

    def state(self) -> np.ndarray:
        return self._observation()

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._target = int(self._rng.integers(self.n_targets))
        obs = self._observation()
        return {a: obs.copy() for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, int]):
        matched = all(int(actions[a]) == self._target for a in self.agents)
        reward = 1.0 if matched else 0.0
        self._t += 1
        self._target = int(self._rng.integers(self.n_targets))
        obs = self._observation()
        truncated = self._t >= self.episode_length
        agents = self.agents
        observations = {a: obs.copy() for a in agents}
        rewards = {a: reward for a in agents}
        terminations = {a: False for a in agents}
        truncations = {a: truncated for a in agents}
        infos = {a: {} for a in agents}
        if truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos


def coordination_env(**kwargs) -> CoordinationEnv:
    return CoordinationEnv(**kwargs)


class ContinuousTargetEnv(ParallelEnv):
    """Continuous-action cooperation: every step all agents see a shared random target
    in ``[-1, 1]`` and the fraction of the episode left, act in ``[-1, 1]``, and each
    receives ``-mean_i |a_i - target|`` (the team reward, duplicated). Uniformly random
    actions score ``-2/3`` per step on average; a perfect team scores 0.
    """

    metadata = {"name": "continuous_target_v0", "render_modes": []}

    def __init__(self, n_agents: int = 2, episode_length: int = 10) -> None:
        if n_agents < 1 or episode_length < 1:
            raise ValueError("need n_agents >= 1 and episode_length >= 1")
        self.episode_length = episode_length
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        self._observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self._rng = np.random.default_rng()
        self._target = 0.0
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Box:
        return self._action_space

    def state(self) -> np.ndarray:
        return np.array([self._target, 1.0 - self._t / self.episode_length], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._target = float(self._rng.uniform(-1.0, 1.0))
        return {a: self.state() for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, np.ndarray]):
        errors = [abs(float(np.clip(actions[a], -1.0, 1.0)[0]) - self._target) for a in self.agents]
        reward = -float(np.mean(errors))
        self._t += 1
        self._target = float(self._rng.uniform(-1.0, 1.0))
        truncated = self._t >= self.episode_length
        agents = self.agents
        result = (
            {a: self.state() for a in agents},
            {a: reward for a in agents},
            {a: False for a in agents},
            {a: truncated for a in agents},
            {a: {} for a in agents},
        )
        if truncated:
            self.agents = []
        return result


def continuous_target_env(**kwargs) -> ContinuousTargetEnv:
    return ContinuousTargetEnv(**kwargs)
