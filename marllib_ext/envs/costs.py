"""Per-agent cost signals for safe MARL: ``info[agent]["cost"]`` after every step."""

from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

from marllib_ext.envs.adapter import COST_KEY


def mpe_collision_counts(world) -> np.ndarray:
    """``(n_agents,)`` number of other colliding agents each agent overlaps.

    Two agents collide when their centres are closer than the sum of their radii
    (mpe2's ``is_collision``); only agents with ``collide=True`` count.
    """
    agents = [agent for agent in world.agents]
    positions = np.array([agent.state.p_pos for agent in agents])
    sizes = np.array([agent.size for agent in agents])
    collides = np.array([agent.collide for agent in agents], dtype=bool)
    distances = np.linalg.norm(positions[:, None, :] - positions[None, :, :], axis=-1)
    overlap = distances < sizes[:, None] + sizes[None, :]
    overlap &= collides[:, None] & collides[None, :]
    np.fill_diagonal(overlap, False)
    return overlap.sum(axis=1)


class MPECollisionCost(BaseParallelWrapper):
    """Adds ``info[agent]["cost"] = collision_cost * (other agents it overlaps)``.

    The cost is the safety signal of safe-MARL baselines (``mappo_lag`` & co.); the
    reward is left untouched. ``collision_cost=0`` still reports a zero cost.
    """

    def __init__(self, env: ParallelEnv, collision_cost: float = 1.0) -> None:
        super().__init__(env)
        if collision_cost < 0:
            raise ValueError(f"collision_cost must be >= 0, got {collision_cost}")
        self.collision_cost = float(collision_cost)

    def state(self) -> np.ndarray:
        return self.env.state()

    def step(self, actions: dict[str, Any]):
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        world = self.env.unwrapped.world
        counts = mpe_collision_counts(world)
        index = {agent.name: i for i, agent in enumerate(world.agents)}
        infos = {
            agent: {
                **infos.get(agent, {}),
                COST_KEY: self.collision_cost * float(counts[index[agent]]),
            }
            for agent in rewards
        }
        return observations, rewards, terminations, truncations, infos


def simple_spread_env(collision_cost: float = 1.0, **spread_kwargs: Any) -> MPECollisionCost:
    """mpe2 ``simple_spread_v3`` with agent-agent collisions reported as cost."""
    from mpe2 import simple_spread_v3

    return MPECollisionCost(simple_spread_v3.parallel_env(**spread_kwargs), collision_cost)
