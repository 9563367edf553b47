"""What a batched simulator hands the batched rollout for all of its worlds at once (no
Ray); the block's math is in ``ops.rollout``."""

from __future__ import annotations

from dataclasses import dataclass

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
        success: ``(B,)`` the env's ``info["success"]`` where an episode ended, or ``None``.
    """

    observations: dict[str, np.ndarray]
    action_masks: dict[str, np.ndarray] | None = None
    state: np.ndarray | None = None
    rewards: dict[str, np.ndarray] | None = None
    terminated: np.ndarray | None = None
    truncated: np.ndarray | None = None
    died: dict[str, np.ndarray] | None = None
    success: np.ndarray | None = None

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


@dataclass
class RolloutBlock:
    """One ``sample()`` call of a batched env runner as ``(T, B, ...)`` arrays, handed
    to a learner that builds its train batch from them directly (no episode chunks).

    Attributes:
        agents: the world's agents; ``module_of``: agent -> its module.
        observations: ``{agent: (T, B, obs_dim)}`` what each agent acted on;
            ``action_masks``: ``{agent: (T, B, n_actions)}`` with them, or ``None``.
        actions: ``{agent: (T, B, ...)}``; ``outputs``: ``{agent: {column: (T, B,
            ...)}}`` the module outputs kept (log-probabilities, distribution inputs).
        states: ``(T, B, state_dim)`` the global state acted on; ``next_states``: the
            state after each step (the final one where the episode ended);
            ``next_observations`` / ``next_action_masks``: each agent's, likewise.
        rewards: ``(T, B, n_agents)``; ``terminated``, ``truncated``: ``(T, B)`` the
            world's episode ended at that step; ``alive``: ``(T, B, n_agents)`` the
            agents present (acting) at each step; ``died``: ``(T, B, n_agents)`` the
            agent terminated at that step while its world went on.
    """

    agents: list[str]
    module_of: dict[str, str]
    observations: dict[str, np.ndarray]
    action_masks: dict[str, np.ndarray] | None
    actions: dict[str, np.ndarray]
    outputs: dict[str, dict[str, np.ndarray]]
    states: np.ndarray
    next_states: np.ndarray
    next_observations: dict[str, np.ndarray]
    next_action_masks: dict[str, np.ndarray] | None
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    alive: np.ndarray
    died: np.ndarray

    def __len__(self) -> int:
        return self.terminated.size

    def env_steps(self) -> int:
        return self.terminated.size

    def agent_steps(self) -> int:
        return int(self.alive.sum())
