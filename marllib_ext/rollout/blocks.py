"""A ``sample()`` call of the batched rollout as ``(T, B, ...)`` arrays; what a
simulator hands out at each step is ``envs.arrays.WorldArrays``; the block's math is in
``ops.rollout``. RLlib carries a block from the runner to the learner as it carries
episodes (``rllib_compat.env_runners.CountedAsEpisodes``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from marllib_ext.rllib_compat.env_runners import CountedAsEpisodes


@dataclass
class RolloutBlock(CountedAsEpisodes):
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
            agent terminated at that step while its world went on; ``starts``: ``(T, B)``
            the world's episode began at that step (``None``: not recorded);
            ``costs`` / ``team_costs``: ``(T, B, n_agents)`` each agent's
            ``info["cost"]`` after the step and its team's summed cost (0 where absent),
            or ``None`` where the env reports no cost.
        rewarded: ``(T, B, n_agents)`` where an agent's reward counts (``None``: where
            it was alive; agents that take turns earn rewards between their turns);
        next_present: ``(T, B, n_agents)`` the agents observed after each step, in the
            state the critic bootstraps on (``None``: alive and not died there).
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
    starts: np.ndarray | None = None
    costs: np.ndarray | None = None
    team_costs: np.ndarray | None = None
    rewarded: np.ndarray | None = None
    next_present: np.ndarray | None = None

    def present_after(self) -> np.ndarray:
        """``(T, B, n_agents)`` the agents observed after each step (``next_present``)."""
        if self.next_present is not None:
            return self.next_present
        return self.alive & ~self.died

    def reward_counted(self) -> np.ndarray:
        """``(T, B, n_agents)`` where an agent's reward counts: ``rewarded``, else where it
        was present (agents that take turns earn rewards between their turns)."""
        return self.alive if self.rewarded is None else self.rewarded

    def observed_after(self) -> np.ndarray:
        """``(T, B, n_agents)`` the agents handed an observation (and its info) after
        each step: observed in the next state (continuing, a turn passing to them), at
        their death, or at their world's end."""
        ended = (self.terminated | self.truncated)[..., None]
        return self.present_after() | self.died | (self.alive & ended)

    def env_steps(self) -> int:
        return self.terminated.size

    def split(self, parts: int) -> list[RolloutBlock]:
        """The block as ``parts`` blocks of the same steps, each holding ``B / parts``
        of the worlds (one per data-parallel learner: RLlib's sharding hands equal
        blocks out whole); ``parts`` must divide ``B``."""
        num_envs = self.terminated.shape[1]
        if parts == 1:
            return [self]
        if num_envs % parts:
            raise ValueError(f"{num_envs} worlds do not split into {parts} equal blocks")
        width = num_envs // parts
        return [
            _sliced(self, (slice(None), slice(k * width, (k + 1) * width))) for k in range(parts)
        ]

    def steps(self, start: int, stop: int | None = None) -> RolloutBlock:
        """The block's steps ``start .. stop - 1`` of every world (as a sampler that
        stopped there would have handed them over)."""
        return _sliced(self, (slice(start, stop),))

    def agent_steps(self) -> int:
        return int(self.alive.sum())


def _sliced(block: RolloutBlock, index: tuple[slice, ...]) -> RolloutBlock:
    """``block`` with every ``(T, B, ...)`` array, also inside the per-agent dicts,
    indexed by ``index`` (steps, then worlds)."""

    def part(value):
        if isinstance(value, np.ndarray):
            return value[index]
        if isinstance(value, dict):
            return {key: part(item) for key, item in value.items()}
        return value

    changed = {
        field.name: part(getattr(block, field.name))
        for field in dataclasses.fields(block)
        if field.name not in ("agents", "module_of")
    }
    return dataclasses.replace(block, **changed)
