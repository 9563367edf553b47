"""``mpe:sparse_spread``: simple_spread with a sparse team reward."""

from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo.utils.env import ParallelEnv


class SparseSpreadEnv(ParallelEnv):
    """mpe2 ``simple_spread_v3`` whose reward is 1.0 to every agent on each step where
    every landmark has an agent within ``radius`` of it, else 0.0 (no distance shaping,
    no collision penalty). Observations, actions and ``state()`` are simple_spread's.
    """

    metadata = {"name": "sparse_spread_v0", "render_modes": ["rgb_array"]}

    def __init__(self, radius: float = 0.1, **spread_kwargs: Any) -> None:
        from mpe2 import simple_spread_v3

        if radius <= 0:
            raise ValueError(f"radius must be > 0, got {radius}")
        self.radius = radius
        self._env = simple_spread_v3.parallel_env(**spread_kwargs)
        self.possible_agents = list(self._env.possible_agents)
        self.agents: list[str] = []
        self.render_mode = self._env.render_mode

    def observation_space(self, agent: str):
        return self._env.observation_space(agent)

    def action_space(self, agent: str):
        return self._env.action_space(agent)

    def state(self) -> np.ndarray:
        return self._env.state()

    def render(self):
        return self._env.render()

    def close(self) -> None:
        self._env.close()

    def all_covered(self) -> bool:
        world = self._env.unwrapped.world
        agents = np.array([agent.state.p_pos for agent in world.agents])
        landmarks = np.array([landmark.state.p_pos for landmark in world.landmarks])
        distances = np.linalg.norm(landmarks[:, None, :] - agents[None, :, :], axis=-1)
        return bool((distances.min(axis=1) <= self.radius).all())

    def reset(self, seed: int | None = None, options: dict | None = None):
        observations, infos = self._env.reset(seed=seed, options=options)
        self.agents = list(self._env.agents)
        return observations, infos

    def step(self, actions):
        observations, rewards, terminations, truncations, infos = self._env.step(actions)
        covered = self.all_covered()
        reward = 1.0 if covered else 0.0
        self.agents = list(self._env.agents)
        infos = {agent: {**infos.get(agent, {}), "success": covered} for agent in rewards}
        return observations, dict.fromkeys(rewards, reward), terminations, truncations, infos


def sparse_spread_env(**kwargs) -> SparseSpreadEnv:
    return SparseSpreadEnv(**kwargs)
