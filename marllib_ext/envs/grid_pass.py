"""``grid:pass``: the two-room "Pass" task of multi-agent exploration papers (CMAE, MACE).

Two agents start in the left room of a ``size x size`` grid split by a wall with one
door cell. Each room has a switch; the door is open only while some agent stands on a
switch. The team is rewarded (1.0 to every agent, MARLlib-style duplication) and the
episode terminates once both agents are in the right room, so one agent has to hold
the left switch while the other passes, and then the other way round from the right
switch. Episodes are truncated after ``max_steps``. Pure numpy, seeded by ``reset``.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

# stay, up, down, left, right as (dx, dy)
MOVES = np.array([[0, 0], [0, 1], [0, -1], [-1, 0], [1, 0]], dtype=np.int64)


class TwoAgentGridEnv(ParallelEnv):
    """Two agents on a ``size x size`` grid, starting in the cells left of the wall at
    ``x = wall_x``: what ``grid:pass`` and ``grid:secret_room`` share. A subclass sets
    ``size``, ``max_steps``, ``wall_x`` and the spaces, and says which doors the agents
    see (``doors``), which cells they may enter (``free``) and when the team has
    solved the task (``solved``). Observation per agent: ``state()`` with the two
    positions swapped for ``agent_1``. The team is rewarded (1.0 to every agent) and the
    episode terminates once solved; it is truncated after ``max_steps``."""

    possible_agents = ["agent_0", "agent_1"]

    def _setup(self, size: int, max_steps: int, observation_dims: int) -> None:
        self.size, self.max_steps = size, max_steps
        self.wall_x = size // 2
        self.agents: list[str] = []
        self._observation_space = spaces.Box(0.0, 1.0, (observation_dims,), np.float32)
        self._action_space = spaces.Discrete(len(MOVES))
        self._rng = np.random.default_rng()
        self.positions = np.zeros((2, 2), dtype=np.int64)
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def state(self) -> np.ndarray:
        scale = self.size - 1
        return np.concatenate(
            [self.positions.reshape(-1) / scale, np.asarray(self.doors(), np.float64).reshape(-1)]
        ).astype(np.float32)

    def _observations(self) -> dict[str, np.ndarray]:
        state = self.state()
        other = np.concatenate([state[2:4], state[0:2], state[4:]]).astype(np.float32)
        return {"agent_0": state, "agent_1": other}

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        cells = [(x, y) for x in range(self.wall_x) for y in range(self.size)]
        chosen = self._rng.choice(len(cells), size=2, replace=False)
        self.positions = np.array([cells[i] for i in chosen], dtype=np.int64)
        return self._observations(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, int]):
        doors = self.doors()  # the doors agents saw when choosing
        for index, agent in enumerate(self.possible_agents):
            target = self.positions[index] + MOVES[int(actions[agent])]
            if self.free(target, doors):
                self.positions[index] = target
        self.t += 1
        success = self.solved()
        truncated = not success and self.t >= self.max_steps
        reward = 1.0 if success else 0.0
        observations = self._observations()
        agents = self.agents
        result = (
            observations,
            {a: reward for a in agents},
            {a: success for a in agents},
            {a: truncated for a in agents},
            {a: {"success": success} for a in agents},
        )
        if success or truncated:
            self.agents = []
        return result


class PassEnv(TwoAgentGridEnv):
    """Observation per agent: own (x, y), the other's (x, y), door open flag, all in [0, 1]."""

    metadata = {"name": "grid_pass_v0", "render_modes": []}

    def __init__(self, size: int = 9, max_steps: int = 100) -> None:
        if size < 5 or size % 2 == 0:
            raise ValueError(f"size must be odd and >= 5, got {size}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self._setup(size, max_steps, observation_dims=5)
        self.door = np.array([self.wall_x, size // 2])
        self.switches = np.array([[1, size - 2], [size - 2, 1]])  # left room, right room

    def door_open(self) -> bool:
        return bool(any((self.positions == s).all(axis=1).any() for s in self.switches))

    def doors(self) -> bool:
        return self.door_open()

    def in_right_room(self) -> np.ndarray:
        return self.positions[:, 0] > self.wall_x

    def solved(self) -> bool:
        return bool(self.in_right_room().all())

    def free(self, cell: np.ndarray, door_open: bool) -> bool:
        x, y = cell
        if not (0 <= x < self.size and 0 <= y < self.size):
            return False
        if x == self.wall_x:
            return door_open and y == self.door[1]
        return True


def pass_env(**kwargs) -> PassEnv:
    return PassEnv(**kwargs)


def toward(position: np.ndarray, goal: np.ndarray) -> int:
    """Greedy move toward ``goal``: x first, then y (stay when there)."""
    dx, dy = np.sign(goal - position)
    if dx:
        return 4 if dx > 0 else 3
    if dy:
        return 1 if dy > 0 else 2
    return 0


def scripted_pass_actions(env: PassEnv) -> dict[str, int]:
    """A team that solves ``grid:pass``: agent_0 holds the left switch while agent_1
    walks through the door to the right switch, then agent_0 follows.

    Through the door means: line up with the door row next to the wall, then step
    through while the door is open.
    """
    left_switch, right_switch = env.switches
    in_right = env.in_right_room()
    door_y = env.door[1]

    def via_door(position: np.ndarray, goal: np.ndarray) -> int:
        if position[0] > env.wall_x or position[0] == env.wall_x:
            return toward(position, goal)
        if position[1] != door_y:
            return toward(position, np.array([position[0], door_y]))
        return 4  # step right toward / through the door

    actions = {}
    if not in_right[1]:
        actions["agent_0"] = toward(env.positions[0], left_switch)
        actions["agent_1"] = via_door(env.positions[1], right_switch)
        if env.positions[1][0] == env.wall_x - 1 and not env.door_open():
            actions["agent_1"] = 0  # wait at the door until it opens
    else:
        actions["agent_1"] = toward(env.positions[1], right_switch)
        actions["agent_0"] = via_door(env.positions[0], right_switch)
    return actions
