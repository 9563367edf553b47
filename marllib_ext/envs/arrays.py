"""The array contract of a batched simulator: what it hands out for all of its worlds at
once (``WorldArrays``) and the calls a sampler makes on it (``ArrayWorld``). The
samplers that read it live in ``rollout/``; the simulators (VMAS, SMAX) here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass
class WorldArrays:
    """What a batched simulator hands out for all of its ``B`` worlds at once, after a
    reset (``observations`` and what goes with them) or a step (all fields).

    Attributes:
        observations: ``{agent: (B, obs_dim)}``; rows of absent agents are ignored.
        action_masks: ``{agent: (B, n_actions)}`` legal actions, or ``None``.
        state: ``(B, state_dim)`` global state, or ``None`` (every observation joined).
        rewards: ``{agent: (B,)}``.
        terminated, truncated: ``(B,)`` the world's episode ended at this step.
        died: ``{agent: (B,)}`` the agent terminated at this step while its world goes
            on (a unit killed), or ``None`` where agents never leave.
        success: ``(B,)`` the env's ``info["success"]`` where an episode ended (as 1/0,
            NaN where a world reported none), or ``None``.
        costs: ``{agent: (B,)}`` the env's ``info["cost"]`` after the step, and
            ``team_costs``: each agent's ``info["team_cost"]`` (its team's sum), or
            ``None`` where the env reports no cost.
        reports: ``(info key, report)`` of each episode the adapter ended at this
            step for a broken env contract (a non-finite reward, an empty action
            mask), or ``None``.
    """

    observations: dict[str, np.ndarray]
    action_masks: dict[str, np.ndarray] | None = None
    state: np.ndarray | None = None
    rewards: dict[str, np.ndarray] | None = None
    terminated: np.ndarray | None = None
    truncated: np.ndarray | None = None
    died: dict[str, np.ndarray] | None = None
    success: np.ndarray | None = None
    costs: dict[str, np.ndarray] | None = None
    team_costs: dict[str, np.ndarray] | None = None
    reports: list[tuple[str, dict]] | None = None

    def where(self, rows: np.ndarray, other: WorldArrays) -> WorldArrays:
        """The reset part (``observations``, ``action_masks``, ``state``) with ``other``'s
        rows where ``rows`` (``(B,)`` bool) and this one's elsewhere."""

        def pick(mine, theirs):
            if mine is None:
                return None
            if isinstance(mine, dict):
                return {k: pick(v, theirs[k]) for k, v in mine.items()}
            return np.where(rows.reshape((-1,) + (1,) * (mine.ndim - 1)), theirs, mine)

        return WorldArrays(
            observations=pick(self.observations, other.observations),
            action_masks=pick(self.action_masks, other.action_masks),
            state=pick(self.state, other.state),
        )


class ArrayWorld(Protocol):
    """A simulator of ``num_envs`` worlds whose agents all act at every step until they
    die. ``provides_state`` / ``provides_action_masks``: its arrays carry a global state
    / action masks."""

    num_envs: int
    agents: list[str]

    def reset_arrays(self, seed: int | None = None) -> WorldArrays:
        """Resets every world."""

    def reset_worlds(self, indices: np.ndarray) -> WorldArrays:
        """Resets the worlds ``indices``; the rows of those worlds are their starts."""

    def step_arrays(self, actions: dict[str, np.ndarray]) -> WorldArrays:
        """One step of every world; ``actions[agent]``: ``(B, ...)``."""
