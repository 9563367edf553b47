"""``grid:secret_room``: the Secret-Room task of multi-agent exploration papers (CMAE,
Liu et al. 2021): Pass with three rooms to choose from, one of which pays.

A ``size x size`` grid: a large room left of the wall at ``x = size // 2``, and right of
it three small rooms stacked along ``y``, split by walls, each with one door in the
wall at its middle row. A switch in the large room (``(1, 1)``) opens all three doors
while an agent stands on it; the switch in each small room (its cell next to the east
edge, on the door row) opens that room's door. Two agents start in the large room. The
team is rewarded (1.0 to every agent) and the episode terminates once both agents are
in the ``target`` room; which room that is, nothing in the observation says. Episodes
are truncated after ``max_steps``. Pure numpy, seeded by ``reset``.
"""

from __future__ import annotations

import numpy as np

from marllib_ext.envs.grid_pass import TwoAgentGridEnv, toward

N_ROOMS = 3


class SecretRoomEnv(TwoAgentGridEnv):
    """Observation per agent: own (x, y), the other's (x, y) and each small room's door
    open flag (3), all in [0, 1]."""

    metadata = {"name": "secret_room_v0", "render_modes": []}

    def __init__(self, size: int = 9, max_steps: int = 100, target: int = 2) -> None:
        if size < 7 or size % 2 == 0:
            raise ValueError(f"size must be odd and >= 7, got {size}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if target not in range(N_ROOMS):
            raise ValueError(f"target must be one of 0, 1, 2 (a small room), got {target}")
        self._setup(size, max_steps, observation_dims=4 + N_ROOMS)
        self.target = target
        # The size - 2 rows that are not walls, split as evenly as numpy splits them.
        rows = np.array_split(np.arange(size - 2), N_ROOMS)
        self.room_rows = [part + k for k, part in enumerate(rows)]  # skip the walls between
        self.wall_rows = [int(self.room_rows[k][-1]) + 1 for k in range(N_ROOMS - 1)]
        self.door_y = np.array([int(r[(len(r) - 1) // 2]) for r in self.room_rows])
        self.main_switch = np.array([1, 1])
        self.room_switches = np.stack([np.full(N_ROOMS, size - 2), self.door_y], axis=1)

    def _on(self, cell: np.ndarray) -> bool:
        return bool((self.positions == cell).all(axis=1).any())

    def doors_open(self) -> np.ndarray:
        """``(3,)`` bool: each small room's door is open."""
        main = self._on(self.main_switch)
        return np.array([main or self._on(switch) for switch in self.room_switches])

    def doors(self) -> np.ndarray:
        return self.doors_open()

    def room_of(self, cell: np.ndarray) -> int:
        """The small room a cell right of the wall lies in (-1 elsewhere)."""
        x, y = cell
        if x <= self.wall_x:
            return -1
        for k, rows in enumerate(self.room_rows):
            if rows[0] <= y <= rows[-1]:
                return k
        return -1

    def in_target(self) -> np.ndarray:
        return np.array([self.room_of(p) == self.target for p in self.positions])

    def solved(self) -> bool:
        return bool(self.in_target().all())

    def free(self, cell: np.ndarray, doors_open: np.ndarray) -> bool:
        x, y = cell
        if not (0 <= x < self.size and 0 <= y < self.size):
            return False
        if x == self.wall_x:
            return any(doors_open[k] and y == self.door_y[k] for k in range(N_ROOMS))
        if x > self.wall_x:
            return y not in self.wall_rows
        return True


def secret_room_env(**kwargs) -> SecretRoomEnv:
    return SecretRoomEnv(**kwargs)


def scripted_secret_room_actions(env: SecretRoomEnv) -> dict[str, int]:
    """A team that knows the target room: agent_0 holds the main switch while agent_1
    walks through the target room's door to that room's switch, then agent_0 follows
    through the door the room switch keeps open."""
    door_y = env.door_y[env.target]
    room_switch = env.room_switches[env.target]

    def via_door(position: np.ndarray, goal: np.ndarray) -> int:
        if position[0] >= env.wall_x:
            return toward(position, goal)
        if position[1] != door_y:
            return toward(position, np.array([position[0], door_y]))
        return 4  # step right toward / through the door

    in_target = env.in_target()
    if not in_target[1]:
        agent_1 = via_door(env.positions[1], room_switch)
        if env.positions[1][0] == env.wall_x - 1 and not env.doors_open()[env.target]:
            agent_1 = 0  # wait at the door until it opens
        return {"agent_0": toward(env.positions[0], env.main_switch), "agent_1": agent_1}
    return {
        "agent_0": via_door(env.positions[0], room_switch),
        "agent_1": toward(env.positions[1], room_switch),
    }
