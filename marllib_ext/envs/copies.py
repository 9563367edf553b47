"""``B`` copies of a plain PettingZoo env as one ``ArrayWorld``: the envs RLlib would
step one by one (``num_envs_per_env_runner`` adapters of MPE, LBF, RWARE, ...) stepped
in one loop, their results stacked into ``(B, ...)`` arrays, so the batched rollout
serves them with one forward pass per step (seed 001's ``(T, B)`` design).

Each copy is the package's ``ParallelEnvAdapter`` (masks, the global state, reward
checks), stepped directly. The arrays carry what the adapter reports: observations
(and action masks), ``info["state"]``, rewards, episode ends, agents that leave,
``info["success"]``, ``info["cost"]`` and ``info["team_cost"]``, the adapter's reports
of a broken env contract; ``refusal()`` says
why an env cannot be carried so (agents take turns, are absent at a start, or infos
carry what the arrays drop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from marllib_ext.envs.adapter import (
    ACTION_MASK_KEY,
    COST_KEY,
    EMPTY_ACTION_MASK_KEY,
    NONFINITE_REWARD_KEY,
    OBSERVATION_KEY,
    STATE_KEY,
    STEP_REWARDS_KEY,
    SUCCESS_KEY,
    TEAM_COST_KEY,
    ParallelEnvAdapter,
)
from marllib_ext.envs.arrays import WorldArrays

# Info entries the arrays carry (or the adapter derives from them).
CARRIED_INFO_KEYS = {
    STATE_KEY, STEP_REWARDS_KEY, SUCCESS_KEY, NONFINITE_REWARD_KEY, EMPTY_ACTION_MASK_KEY,
    COST_KEY, TEAM_COST_KEY,
}  # fmt: skip
COST_KEYS = (COST_KEY, TEAM_COST_KEY)
CONTRACT_KEYS = (NONFINITE_REWARD_KEY, EMPTY_ACTION_MASK_KEY)


class CopiesWorld:
    """``ArrayWorld`` over adapters of one env, one world per adapter."""

    provides_state = True  # every step's info["state"], as the adapter builds it

    def __init__(
        self,
        adapters: list[ParallelEnvAdapter],
        *,
        turn_based: bool = False,
        make_probe: Callable[[], ParallelEnvAdapter] | None = None,
    ) -> None:
        """``make_probe``: builds another adapter of the env for ``refusal()`` to try, so
        that the copies' own envs keep their state (default: the first copy)."""
        self.adapters = adapters
        self.make_probe = make_probe
        self.num_envs = len(adapters)
        first = adapters[0]
        self.agents = sorted(first.par_env.possible_agents)
        self.slots = [adapter.par_env for adapter in adapters]
        self.provides_action_masks = first.mask_source != "none"
        self.turn_based = turn_based
        self.env_name = first.env_name
        state_dim = first.state_space.shape[0]
        self._state = np.zeros((self.num_envs, state_dim), np.float32)
        self._observations = {
            agent: np.zeros((self.num_envs, *self._plain_shape(agent)), np.float32)
            for agent in self.agents
        }
        self._masks = None
        if self.provides_action_masks:
            self._masks = {
                agent: np.zeros(
                    (self.num_envs, first.observation_space[agent][ACTION_MASK_KEY].shape[0]),
                    np.float32,
                )
                for agent in self.agents
            }
        self._present = [set(self.agents) for _ in adapters]

    def _plain_shape(self, agent: str) -> tuple[int, ...]:
        space = self.adapters[0].observation_space[agent]
        return space[OBSERVATION_KEY].shape if self.provides_action_masks else space.shape

    def refusal(self, seed: int | None = None, *, infos_read: bool = True) -> str | None:
        """Why the batched rollout cannot carry this env (``None``: it can). Probes one
        reset and one step of the first copy with random actions. ``infos_read``: the
        runner hands episode chunks, whose infos would lack what the arrays drop (a
        learner that takes rollout blocks reads none of them)."""
        if self.turn_based:
            return "agents take turns (an AEC env)"
        adapter = self.adapters[0] if self.make_probe is None else self.make_probe()
        try:
            return self._probe(adapter, seed, infos_read)
        finally:
            if self.make_probe is not None:
                adapter.close()

    def _probe(self, adapter: ParallelEnvAdapter, seed: int | None, infos_read: bool) -> str | None:
        observations, infos = adapter.reset(seed=seed)
        absent = [agent for agent in self.agents if agent not in observations]
        if absent:
            return f"agents {absent} are absent at an episode's start"
        actions = {
            agent: adapter.action_space[agent].sample(
                mask=observation[ACTION_MASK_KEY].astype(np.int8)
                if self.provides_action_masks
                else None
            )
            for agent, observation in observations.items()
        }
        _, _, _, _, infos = adapter.step(actions)
        # An env that reports its masks in the infos: the adapter moved them into the
        # observations, and the arrays carry them there.
        carried = CARRIED_INFO_KEYS | ({ACTION_MASK_KEY} if self.provides_action_masks else set())
        extra = sorted({key for info in infos.values() for key in (info or {})} - carried)
        if extra and infos_read:
            return f"the env's infos carry entries the arrays drop: {extra}"
        return None

    # ---- the array contract -------------------------------------------------------------
    def reset_arrays(self, seed: int | None = None) -> WorldArrays:
        for world in range(self.num_envs):
            self._reset(world, None if seed is None else seed + world)
        return self._arrays()

    def reset_worlds(self, indices: np.ndarray) -> WorldArrays:
        for world in indices:
            self._reset(int(world), None)
        return self._arrays()

    def step_arrays(self, actions: dict[str, np.ndarray]) -> WorldArrays:
        num_envs, agents = self.num_envs, self.agents
        rewards = {agent: np.zeros(num_envs) for agent in agents}
        died = {agent: np.zeros(num_envs, bool) for agent in agents}
        terminated = np.zeros(num_envs, bool)
        truncated = np.zeros(num_envs, bool)
        success = np.full(num_envs, np.nan)  # 1/0 where the env reports it
        costs = {key: {agent: np.zeros(num_envs) for agent in agents} for key in COST_KEYS}
        any_cost = False
        reports: list[tuple[str, dict]] = []
        for world, adapter in enumerate(self.adapters):
            present = self._present[world]
            observations, step_rewards, terminateds, truncateds, infos = adapter.step(
                {agent: actions[agent][world] for agent in agents if agent in present}
            )
            for agent, reward in step_rewards.items():
                rewards[agent][world] = reward
            ended = bool(terminateds["__all__"] or truncateds["__all__"])
            terminated[world] = bool(terminateds["__all__"])
            truncated[world] = ended and not terminated[world]
            reports += self._reports(infos)
            self._store(world, observations, infos)
            for agent in list(present):
                if terminateds.get(agent) or truncateds.get(agent):
                    present.discard(agent)
                    died[agent][world] = not ended
            reported = [info[SUCCESS_KEY] for info in infos.values() if SUCCESS_KEY in (info or {})]
            if reported:
                success[world] = float(any(bool(value) for value in reported))
            for agent, info in infos.items():
                for key in COST_KEYS:
                    if key in (info or {}):
                        costs[key][agent][world] = info[key]
                        any_cost = True
        arrays = self._arrays()
        arrays.rewards = rewards
        arrays.terminated, arrays.truncated = terminated, truncated
        arrays.died = died
        arrays.success = None if np.isnan(success).all() else success
        arrays.reports = reports or None
        if any_cost:
            arrays.costs, arrays.team_costs = costs[COST_KEY], costs[TEAM_COST_KEY]
        return arrays

    def close(self) -> None:
        for adapter in self.adapters:
            adapter.close()

    # ---- helpers ----------------------------------------------------------------------
    def _reset(self, world: int, seed: int | None) -> None:
        observations, infos = self.adapters[world].reset(seed=seed)
        absent = [agent for agent in self.agents if agent not in observations]
        if absent:
            raise ValueError(
                f"env {self.env_name!r}: agents {absent} are absent at an episode's start; "
                "the batched rollout needs every agent there"
            )
        self._present[world] = set(self.agents)
        self._store(world, observations, infos)

    def _store(self, world: int, observations: dict[str, Any], infos: dict[str, Any]) -> None:
        for agent, observation in observations.items():
            if self._masks is not None:
                self._masks[agent][world] = observation[ACTION_MASK_KEY]
                observation = observation[OBSERVATION_KEY]
            self._observations[agent][world] = observation
        state = next((info[STATE_KEY] for info in infos.values() if STATE_KEY in info), None)
        if state is not None:
            self._state[world] = state

    @staticmethod
    def _reports(infos) -> list[tuple[str, dict]]:
        """The adapter's report of a broken env contract (it zeroes a non-finite reward
        and ends the episode), once per episode."""
        for info in infos.values():
            found = [(key, info[key]) for key in CONTRACT_KEYS if key in (info or {})]
            if found:
                return found[:1]
        return []

    def _arrays(self) -> WorldArrays:
        return WorldArrays(
            observations={agent: obs.copy() for agent, obs in self._observations.items()},
            action_masks=None
            if self._masks is None
            else {agent: mask.copy() for agent, mask in self._masks.items()},
            state=self._state.copy(),
        )
