"""Time-aware observations (``--env-arg time_feature=true``): the share of the episode
still left, appended to every agent's observation and to the global state.

In a finite-horizon episode, whether a team can still meet a remaining budget (EFX's
``z_t``) depends on how many steps are left, which most env observations do not carry
(MPE's do not). Without it, a budget-conditioned policy sees the same input on rows that
can and rows that cannot meet their budget.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.wrappers import BaseParallelWrapper

from marllib_ext.errors import ConfigError

TIME_FEATURE_ARG = "time_feature"


def time_left(t: int, max_episode_steps: int) -> float:
    """``(T - t) / T``, clipped to ``[0, 1]``: 1 at reset, 0 at the declared limit."""
    return float(np.clip((max_episode_steps - t) / max_episode_steps, 0.0, 1.0))


class TimeLeftObservation(BaseParallelWrapper):
    """``obs_i -> [obs_i, (T - t) / T]`` for every agent, ``state -> [state, (T - t) / T]``;
    ``t`` counts env steps since reset, ``T`` is the env's declared episode limit."""

    def __init__(self, env, max_episode_steps: int) -> None:
        super().__init__(env)
        if max_episode_steps < 1:
            raise ConfigError(f"time_feature needs an episode limit >= 1, got {max_episode_steps}")
        self.max_episode_steps = int(max_episode_steps)
        self.t = 0
        self._spaces: dict[str, gym.spaces.Box] = {}

    def observation_space(self, agent):
        if agent not in self._spaces:
            space = self.env.observation_space(agent)
            if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
                raise ConfigError(
                    f"time_feature needs flat Box observations; agent {agent!r} has {space}"
                )
            self._spaces[agent] = gym.spaces.Box(
                np.append(space.low, 0.0).astype(space.dtype),
                np.append(space.high, 1.0).astype(space.dtype),
                dtype=space.dtype,
            )
        return self._spaces[agent]

    def _with_time(self, observations: dict[str, Any]) -> dict[str, Any]:
        left = time_left(self.t, self.max_episode_steps)
        return {
            agent: np.append(obs, left).astype(self.observation_space(agent).dtype)
            for agent, obs in observations.items()
        }

    def reset(self, seed: int | None = None, options: dict | None = None):
        observations, infos = self.env.reset(seed=seed, options=options)
        self.t = 0
        return self._with_time(observations), infos

    def step(self, actions):
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        self.t += 1
        return self._with_time(observations), rewards, terminations, truncations, infos

    def state(self) -> np.ndarray:
        state = np.asarray(self.env.state(), dtype=np.float32).reshape(-1)
        return np.append(state, time_left(self.t, self.max_episode_steps)).astype(np.float32)
