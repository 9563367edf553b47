"""Natively batched envs (one simulator stepping many worlds at once, as VMAS does)
behind RLlib's vectorized multi-agent env.

RLlib 2.60's ``MultiAgentEnvRunner`` builds ``num_envs_per_env_runner`` separate env
copies and steps them one after another (``SyncVectorMultiAgentEnv``). A batched
simulator is instead one object with ``num_envs`` worlds; ``BatchedVectorEnv`` puts
it behind RLlib's ``VectorMultiAgentEnv`` interface: one batched step per vector
step, then each world's slot is read through its own ``ParallelEnvAdapter`` (global
state, step rewards, episode-end flags), as every other env is.

A ``BatchedWorld`` (``EnvSpec.batched_creator(num_envs, **env_args)``) holds the
simulator and ``slots``: one PettingZoo ``ParallelEnv`` per world whose ``reset`` /
``step`` hand out what the batched call computed for that world.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from pettingzoo.utils.env import ParallelEnv
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.env.vector.vector_multi_agent_env import VectorMultiAgentEnv


class BatchedWorld(Protocol):
    """``num_envs`` worlds stepped by one call."""

    num_envs: int
    slots: Sequence[ParallelEnv]

    def reset(self, seed: int | None = None) -> None:
        """Resets every world; each slot's next ``reset()`` returns its world's start."""

    def step(self, actions: Sequence[dict[str, Any]]) -> None:
        """Steps every world at once (``actions[i]``: world i's actions, ``{}`` for a
        world about to be reset); each slot's next ``step()`` returns its result."""

    def reset_worlds(self, indices: Sequence[int]) -> Any:
        """Resets the worlds ``indices``; each of their slots' next ``reset()`` returns
        its world's start."""

    def close(self) -> None: ...


class WorldSlot(ParallelEnv):
    """World ``index`` of a ``BatchedWorld`` as a PettingZoo ParallelEnv: in a batch it
    returns what the world's batched call left for it; a slot of a one-world simulator
    steps and resets the world itself (a single env). Agents whose step ended them
    leave ``agents``. The world keeps ``observation_spaces``, ``action_spaces`` and the
    pending results ``_pending_reset`` / ``_pending_step`` by world index."""

    metadata = {"name": "batched_world", "is_parallelizable": True}

    def __init__(self, world: Any, index: int) -> None:
        self.world = world
        self.index = index
        self.possible_agents = list(world.agents)
        self.agents = list(world.agents)

    def observation_space(self, agent: str):
        return self.world.observation_spaces[agent]

    def action_space(self, agent: str):
        return self.world.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None):
        if self.index not in self.world._pending_reset:
            if self.world.num_envs == 1:
                self.world.reset(seed)
            else:
                self.world.reset_worlds([self.index])
        observations, infos = self.world._pending_reset.pop(self.index)
        self.agents = list(self.possible_agents)
        return observations, infos

    def step(self, actions: dict[str, Any]):
        if self.index not in self.world._pending_step:
            if self.world.num_envs != 1:
                raise RuntimeError(
                    f"world {self.index} of a batch of {self.world.num_envs} "
                    f"{self.metadata['name']} worlds steps only with the batch "
                    "(BatchedVectorEnv.step)"
                )
            self.world.step([actions])
        result = self.world._pending_step.pop(self.index)
        terminated, truncated = result[2], result[3]
        self.agents = [a for a in self.agents if not (terminated.get(a) or truncated.get(a))]
        return result

    def close(self) -> None:
        self.world.close()


class BatchedVectorEnv(VectorMultiAgentEnv):
    """RLlib's vector multi-agent env over one ``BatchedWorld``.

    Auto-reset follows RLlib's ``"next_step"`` mode: a world that ended is reset on
    the next ``step`` call (its actions are ``{}``), after the batched step, and its
    slot returns the reset observations with zero rewards.

    Args:
        world: the batched simulator and its slots.
        adapt: ``adapt(slot) -> MultiAgentEnv`` (the package's ``ParallelEnvAdapter``
            with the env's teams and wrappers).
    """

    def __init__(self, world: BatchedWorld, adapt: Callable[[ParallelEnv], MultiAgentEnv]) -> None:
        super().__init__()
        self.world = world
        self.envs = [adapt(slot) for slot in world.slots]
        self.num_envs = world.num_envs
        first = self.envs[0]
        self.single_observation_spaces = dict(first.observation_space.spaces)
        self.single_action_spaces = dict(first.action_space.spaces)
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.metadata = {"autoreset_mode": "next_step"}
        self._ended = np.zeros(self.num_envs, dtype=bool)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.world.reset(seed)
        self._ended[:] = False
        observations, infos = zip(*(env.reset() for env in self.envs), strict=True)
        return list(observations), list(infos)

    def step(self, actions: list[dict[str, Any]]):
        ended = np.flatnonzero(self._ended)
        self.world.step([{} if self._ended[i] else actions[i] for i in range(self.num_envs)])
        if len(ended):
            self.world.reset_worlds(ended)  # as the batched rollout resets them
        results = []
        for i, env in enumerate(self.envs):
            if self._ended[i]:
                observations, infos = env.reset()
                agents = env.possible_agents
                results.append(
                    (
                        observations,
                        {a: 0.0 for a in agents},
                        {**{a: False for a in agents}, "__all__": False},
                        {**{a: False for a in agents}, "__all__": False},
                        infos,
                    )
                )
            else:
                results.append(env.step(actions[i]))
        self._ended = np.array([r[2]["__all__"] or r[3]["__all__"] for r in results])
        observations, rewards, terminateds, truncateds, infos = (
            list(column) for column in zip(*results, strict=True)
        )
        return observations, rewards, terminateds, truncateds, infos

    def close_extras(self, **kwargs: Any) -> None:
        self.world.close()
