"""The agent's id and its last action in its observation (``--env-arg
agent_id_feature=true last_action_feature=true``; the joint-Q settings ``obs_agent_id``
and ``obs_last_action`` set them), as PyMARL and EPyMARL build an agent's input.

``obs_i -> [obs_i, one_hot(i), one_hot(a_i(t - 1))]``: ``i`` is the agent's position
among the env's possible agents (sorted), the last action is zeros after a reset and
where the agent did not act. A shared network then tells its agents apart; a
feed-forward agent sees what it just did. The env's own state is unchanged (a state
joined from the observations carries them).

``AgentInputs`` wraps a PettingZoo env (each world of RLlib's per-world path);
``AgentInputsWorld`` wraps a batched simulator's array calls the same way, so that the
batched rollout samples the same inputs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.wrappers import BaseParallelWrapper

from marllib_ext.envs.adapter import OBSERVATION_KEY
from marllib_ext.envs.arrays import WorldArrays
from marllib_ext.errors import ConfigError

AGENT_ID_ARG = "agent_id_feature"
LAST_ACTION_ARG = "last_action_feature"


def agent_input_features(
    index: int, n_agents: int, last_action: int | None, n_actions: int | None
) -> np.ndarray:
    """``[one_hot(index) (n_agents), one_hot(last_action) (n_actions)]``, each part left
    out where its size is ``None``/0; no last action gives zeros."""
    parts = []
    if n_agents:
        parts.append(np.eye(n_agents, dtype=np.float32)[index])
    if n_actions:
        action = np.zeros(n_actions, np.float32)
        if last_action is not None:
            action[int(last_action)] = 1.0
        parts.append(action)
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


class AgentInputs(BaseParallelWrapper):
    """Appends each agent's id and last action (``agent_input_features``) to its flat
    ``Box`` observation (to the ``observation`` entry of a masked one)."""

    def __init__(self, env, *, agent_id: bool, last_action: bool) -> None:
        super().__init__(env)
        self.ids = sorted(env.possible_agents)
        self.with_id, self.with_action = agent_id, last_action
        self.last_actions: dict[str, int] = {}
        self._spaces: dict[str, gym.Space] = {}
        for agent in self.ids:
            space = env.action_space(agent)
            if last_action and not isinstance(space, gym.spaces.Discrete):
                raise ConfigError(
                    f"{LAST_ACTION_ARG} needs discrete actions; agent {agent!r} has {space}"
                )

    def _sizes(self, agent: str) -> tuple[int, int]:
        n_actions = int(self.env.action_space(agent).n) if self.with_action else 0
        return (len(self.ids) if self.with_id else 0), n_actions

    def observation_space(self, agent):
        if agent not in self._spaces:
            space = self.env.observation_space(agent)
            plain = space[OBSERVATION_KEY] if isinstance(space, gym.spaces.Dict) else space
            if not isinstance(plain, gym.spaces.Box) or len(plain.shape) != 1:
                raise ConfigError(
                    f"{AGENT_ID_ARG} / {LAST_ACTION_ARG} need flat Box observations; agent "
                    f"{agent!r} has {plain}"
                )
            width = sum(self._sizes(agent))
            wider = gym.spaces.Box(
                np.append(plain.low, np.zeros(width)).astype(plain.dtype),
                np.append(plain.high, np.ones(width)).astype(plain.dtype),
                dtype=plain.dtype,
            )
            if isinstance(space, gym.spaces.Dict):
                wider = gym.spaces.Dict({**space.spaces, OBSERVATION_KEY: wider})
            self._spaces[agent] = wider
        return self._spaces[agent]

    def _augmented(self, observations: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for agent, obs in observations.items():
            n_agents, n_actions = self._sizes(agent)
            extra = agent_input_features(
                self.ids.index(agent), n_agents, self.last_actions.get(agent), n_actions
            )
            if isinstance(obs, dict):
                plain = np.append(obs[OBSERVATION_KEY], extra).astype(np.float32)
                out[agent] = {**obs, OBSERVATION_KEY: plain}
            else:
                out[agent] = np.append(obs, extra).astype(np.float32)
        return out

    def reset(self, seed: int | None = None, options: dict | None = None):
        observations, infos = self.env.reset(seed=seed, options=options)
        self.last_actions = {}
        return self._augmented(observations), infos

    def step(self, actions):
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        self.last_actions = {agent: int(action) for agent, action in actions.items()}
        return self._augmented(observations), rewards, terminations, truncations, infos

    def state(self) -> np.ndarray:
        return self.env.state()


class AgentInputsWorld:
    """A batched simulator (``envs.arrays.ArrayWorld``) whose array calls hand out each
    agent's observation with its id and last action appended, as ``AgentInputs`` does
    for each world; everything else is the simulator's.

    ``last`` holds each world's last actions (``-1``: none, after a reset)."""

    def __init__(self, world, *, agent_id: bool, last_action: bool) -> None:
        self.world = world
        self.ids = sorted(world.agents)
        self.with_id, self.with_action = agent_id, last_action
        self.n_actions = {}
        for agent in self.ids:
            space = world.slots[0].action_space(agent)
            if last_action and not isinstance(space, gym.spaces.Discrete):
                raise ConfigError(
                    f"{LAST_ACTION_ARG} needs discrete actions; agent {agent!r} has {space}"
                )
            self.n_actions[agent] = int(space.n) if last_action else 0
        self.last = {agent: np.full(world.num_envs, -1, np.int64) for agent in self.ids}

    def __getattr__(self, name: str):
        return getattr(self.world, name)

    def _features(self, agent: str) -> np.ndarray:
        """``(B, n_agents + n_actions)`` the agent's id and last action in every world."""
        parts = []
        if self.with_id:
            ids = np.zeros((self.world.num_envs, len(self.ids)), np.float32)
            ids[:, self.ids.index(agent)] = 1.0
            parts.append(ids)
        if self.with_action:
            last = self.last[agent]
            actions = np.zeros((len(last), self.n_actions[agent]), np.float32)
            acted = last >= 0
            actions[np.flatnonzero(acted), last[acted]] = 1.0
            parts.append(actions)
        return np.concatenate(parts, axis=1)

    def _augmented(self, arrays: WorldArrays) -> WorldArrays:
        observations = {
            agent: np.concatenate([np.asarray(obs, np.float32), self._features(agent)], axis=1)
            for agent, obs in arrays.observations.items()
        }
        # A copy: the simulator may keep the arrays it returned (pending per-world results).
        return dataclasses.replace(arrays, observations=observations)

    def reset_arrays(self, seed: int | None = None) -> WorldArrays:
        arrays = self.world.reset_arrays(seed)
        for last in self.last.values():
            last[:] = -1
        return self._augmented(arrays)

    def reset_worlds(self, indices):
        arrays = self.world.reset_worlds(indices)
        for last in self.last.values():
            last[np.asarray(indices, dtype=np.int64)] = -1
        return self._augmented(arrays) if isinstance(arrays, WorldArrays) else arrays

    def step_arrays(self, actions: dict[str, np.ndarray]) -> WorldArrays:
        arrays = self.world.step_arrays(actions)
        for agent, action in actions.items():
            self.last[agent] = np.array(action, np.int64).reshape(-1)  # a copy: reset writes it
        return self._augmented(arrays)
