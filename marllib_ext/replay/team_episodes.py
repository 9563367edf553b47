"""A replay store of whole team episodes, time-aligned across agents (numpy, no Ray).

Why not RLlib's ``MultiAgentEpisodeReplayBuffer``: in ray 2.60 it samples each module
independently (transitions of different agents come from different env steps), its
``"synchronized"`` mode carries a source comment that it "gets the wrong action", and
sequence sampling (``batch_length_T``) for recurrent modules is not implemented. A
mixed Q loss needs every agent's step ``t`` of one episode in one row, and GRU agents
need whole episodes, so episodes are stored here as padded arrays.

Layout of slot ``k`` (agents in sorted id order, ``T`` = longest episode stored)::

    obs        (T + 1, n, d)   each agent's observation, zero-padded to d
    state      (T + 1, s)      the global state
    actions    (T, n)          int64 (discrete) or (T, n, a) float32 (continuous)
    rewards    (T, n)
    terminated (T,)            1 on the last step when the episode ended terminally
    action_mask (T + 1, n, A)  1 on legal actions (only on envs with action masks)
    present    (T + 1, n)      1 where the agent acts (row T: alive at the end)
    agent_terminated (T, n)    1 at the step after which the agent terminated (died)
    length                     real steps; rows t >= length are padding

Sampling units: single team transitions ``(k, t)`` (feed-forward agents) or whole
episodes (recurrent agents). With priorities, a transition is drawn with probability
``p^alpha / sum p^alpha`` and an episode with its transitions' mean priority; new data
enters at the largest priority seen; ``update_priorities`` blends the new priority into
the stored one, ``p <- (1 - per_beta) p + per_beta p_new`` (ROER's EMA; ``per_beta=1``
replaces as in PER). Importance weights ``(N P)^-beta / max`` correct the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from marllib_ext.ops.replay_spread import sampling_spread, uniform_spread
from marllib_ext.replay.transitions import PrioritizedRing, refuse_past_memory


@dataclass(frozen=True)
class TeamEpisode:
    """One finished (or time-limited) episode, agents in sorted id order."""

    obs: npt.NDArray[np.float32]  # (T + 1, n, d)
    state: npt.NDArray[np.float32]  # (T + 1, s)
    actions: np.ndarray  # (T, n) int or (T, n, a) float
    rewards: npt.NDArray[np.float32]  # (T, n)
    terminated: bool
    action_mask: npt.NDArray[np.float32] | None = None  # (T + 1, n, A), envs with masks
    present: npt.NDArray[np.float32] | None = None  # (T + 1, n); None: every agent acts
    agent_terminated: npt.NDArray[np.float32] | None = None  # (T, n); None: no agent died

    def __post_init__(self) -> None:
        length = self.rewards.shape[0]
        n_agents = self.obs.shape[1]
        if self.present is None:
            object.__setattr__(self, "present", np.ones((length + 1, n_agents), np.float32))
        if self.agent_terminated is None:
            object.__setattr__(self, "agent_terminated", np.zeros((length, n_agents), np.float32))
        if self.action_mask is not None and self.action_mask.shape[:2] != self.obs.shape[:2]:
            raise ValueError(
                f"action masks {self.action_mask.shape} must match the observations' "
                f"(T + 1, n) = {self.obs.shape[:2]}"
            )
        if self.obs.shape[0] != length + 1 or self.state.shape[0] != length + 1:
            raise ValueError(
                f"an episode of {length} steps needs {length + 1} observations and states, "
                f"got {self.obs.shape[0]} and {self.state.shape[0]}"
            )
        if self.actions.shape[0] != length:
            raise ValueError(f"{self.actions.shape[0]} actions for {length} steps")
        if length < 1:
            raise ValueError("an episode needs at least one step")

    @property
    def length(self) -> int:
        return int(self.rewards.shape[0])


@dataclass(frozen=True)
class SampledTeamBatch:
    """Sequences of ``L`` team steps (``L = 1`` for transitions).

    ``slots``/``starts`` locate each sequence in the store (for priority updates);
    ``mask (B, L)`` is 1 on real steps; ``weights (B,)`` are importance weights;
    ``action_mask (B, L + 1, n, A)`` only on envs with action masks (0 on padding)."""

    obs: npt.NDArray[np.float32]  # (B, L + 1, n, d)
    state: npt.NDArray[np.float32]  # (B, L + 1, s)
    actions: np.ndarray  # (B, L, n[, a])
    rewards: npt.NDArray[np.float32]  # (B, L, n)
    terminated: npt.NDArray[np.float32]  # (B, L)
    mask: npt.NDArray[np.float32]  # (B, L)
    weights: npt.NDArray[np.float32]  # (B,)
    slots: npt.NDArray[np.int64]  # (B,)
    starts: npt.NDArray[np.int64]  # (B,)
    action_mask: npt.NDArray[np.float32] | None = None  # (B, L + 1, n, A)
    present: npt.NDArray[np.float32] | None = None  # (B, L + 1, n), 0 on padding
    agent_terminated: npt.NDArray[np.float32] | None = None  # (B, L, n)

    def columns(self) -> dict[str, np.ndarray]:
        masks = {} if self.action_mask is None else {"action_mask": self.action_mask}
        return {
            **masks,
            "present": self.present,
            "agent_terminated": self.agent_terminated,
            "obs": self.obs,
            "state": self.state,
            "actions": self.actions,
            "rewards": self.rewards,
            "terminated": self.terminated,
            "mask": self.mask,
            "weights": self.weights,
        }


class TeamEpisodeStore(PrioritizedRing):
    """Ring buffer of ``capacity`` team episodes (see the module docstring)."""

    unit = "episode"

    def __init__(self, capacity: int, **priorities) -> None:
        super().__init__(capacity, **priorities)
        self.lengths = np.zeros(self.capacity, dtype=np.int64)
        self.next_slot = 0

    # ---- adding -----------------------------------------------------------------------
    @property
    def num_transitions(self) -> int:
        return int(self.lengths.sum())

    def add(self, episode: TeamEpisode) -> int:
        """Stores ``episode`` (overwriting the oldest when full); returns its slot."""
        self._ensure_room(episode)
        assert self.arrays is not None
        slot, length = self.next_slot, episode.length
        if (episode.action_mask is None) != ("action_mask" not in self.arrays):
            raise ValueError("episodes with and without action masks cannot share a store")
        for name in self.arrays:
            self.arrays[name][slot] = 0
        if episode.action_mask is not None:
            self.arrays["action_mask"][slot, : length + 1] = episode.action_mask
        self.arrays["present"][slot, : length + 1] = episode.present
        self.arrays["agent_terminated"][slot, :length] = episode.agent_terminated
        self.arrays["obs"][slot, : length + 1, :, : episode.obs.shape[2]] = episode.obs
        self.arrays["state"][slot, : length + 1] = episode.state
        self.arrays["actions"][slot, :length] = episode.actions
        self.arrays["rewards"][slot, :length] = episode.rewards
        self.arrays["terminated"][slot, length - 1] = float(episode.terminated)
        self.arrays["priority"][slot, :length] = self.max_priority
        self.lengths[slot] = length
        self.next_slot = (slot + 1) % self.capacity
        self.num_added += 1
        return slot

    def _ensure_room(self, episode: TeamEpisode) -> None:
        """Arrays for ``episode``'s length. Every slot is allocated at once with
        ``np.zeros``, whose pages the OS maps only when written, so resident memory
        follows the slots written (never the capacity up front, and no copy when the
        store fills); the capacity's bytes are checked against free memory first."""
        n_agents, obs_dim = episode.obs.shape[1], episode.obs.shape[2]
        if self.arrays is None:
            self._check_memory(episode)
            self.arrays = self._zeros(episode, self.capacity, episode.length)
            return
        stored = self.arrays["obs"]
        if stored.shape[2] != n_agents or stored.shape[3] < obs_dim:
            raise ValueError(
                f"episode has {n_agents} agents with observations of size {obs_dim}; the "
                f"store holds {stored.shape[2]} agents of size {stored.shape[3]}"
            )
        if episode.length > self.max_length:  # longer than any before: copy the written slots
            self._check_memory(episode, already_held=self.written_bytes)
            self.arrays = self._with_rows(self.arrays, episode.length)

    @property
    def slots_written(self) -> int:
        return min(self.num_added, self.capacity)

    @property
    def written_bytes(self) -> int:
        """Bytes of the slots written so far (what the store holds resident)."""
        if self.arrays is None:
            return 0
        return self.slots_written * sum(a[:1].nbytes for a in self.arrays.values())

    def _with_rows(self, arrays: dict[str, np.ndarray], length: int) -> dict[str, np.ndarray]:
        """Zero arrays of ``capacity`` episodes of ``length`` steps shaped like ``arrays``,
        holding ``arrays``' first ``slots_written`` slots (shorter in time, or fewer)."""
        written = min(self.slots_written, len(arrays["rewards"]))
        steps = arrays["rewards"].shape[1]
        grown = {}
        for name, array in arrays.items():
            extra = array.shape[1] - steps  # 1 for the (T + 1)-step arrays
            shape = (self.capacity, length + extra, *array.shape[2:])
            grown[name] = np.zeros(shape, array.dtype)
            grown[name][:written, : array.shape[1]] = array[:written]
        return grown

    @staticmethod
    def _zeros(episode: TeamEpisode, slots: int, t: int) -> dict[str, np.ndarray]:
        """Zero arrays of ``slots`` episodes of ``t`` steps shaped for ``episode``."""
        n_agents, obs_dim = episode.obs.shape[1], episode.obs.shape[2]
        arrays = {
            "obs": np.zeros((slots, t + 1, n_agents, obs_dim), np.float32),
            "state": np.zeros((slots, t + 1, episode.state.shape[1]), np.float32),
            "actions": np.zeros((slots, t, *episode.actions.shape[1:]), episode.actions.dtype),
            "rewards": np.zeros((slots, t, n_agents), np.float32),
            "terminated": np.zeros((slots, t), np.float32),
            "priority": np.zeros((slots, t), np.float64),
            "present": np.zeros((slots, t + 1, n_agents), np.float32),
            "agent_terminated": np.zeros((slots, t, n_agents), np.float32),
        }
        if episode.action_mask is not None:
            shape = (slots, t + 1, *episode.action_mask.shape[1:])
            arrays["action_mask"] = np.zeros(shape, np.float32)
        return arrays

    def bytes_at_capacity(self, episode: TeamEpisode) -> int:
        """Bytes of ``capacity`` episodes as long as ``episode`` (longer ones pad all)."""
        one = self._zeros(episode, 1, episode.length)
        return self.capacity * sum(array.nbytes for array in one.values())

    def _check_memory(self, episode: TeamEpisode, already_held: int = 0) -> None:
        needed = self.bytes_at_capacity(episode)
        refuse_past_memory(
            needed - already_held,
            f"buffer_size={self.capacity}",
            f"the team replay store's {episode.length}-step episodes (each "
            f"{needed / self.capacity / 2**20:.1f} MiB)",
        )

    @property
    def max_length(self) -> int:
        return 0 if self.arrays is None else int(self.arrays["rewards"].shape[1])

    # ---- sampling ---------------------------------------------------------------------
    def valid_steps(self) -> npt.NDArray[np.bool_]:
        """``(slots allocated, T)`` True on stored real steps."""
        rows = 0 if self.arrays is None else self.arrays["obs"].shape[0]
        return np.arange(self.max_length)[None, :] < self.lengths[:rows, None]

    def sample_transitions(self, batch_size: int, length: int = 1) -> SampledTeamBatch:
        """``batch_size`` team transitions ``(k, t)``: sequences of ``length`` steps from
        each drawn step (1: single transitions; more: n-step windows, cut at the
        episode's end by their ``mask``)."""
        self._require_data()
        flat = np.flatnonzero(self.valid_steps().reshape(-1))
        if self.prioritized:
            weights = self._transition_weights(flat)
            probs = weights / weights.sum()
            pick = self.rng.choice(len(flat), size=batch_size, p=probs)
            importance = self._importance(probs[pick], len(flat))
        else:
            pick = self.rng.integers(0, len(flat), size=batch_size)
            importance = np.ones(batch_size, np.float32)
        slots, starts = np.divmod(flat[pick], self.max_length)
        return self._gather(slots, starts, length, importance)

    def sample_episodes(self, batch_size: int) -> SampledTeamBatch:
        """``batch_size`` whole episodes, padded to the longest of them."""
        self._require_data()
        held = np.flatnonzero(self.lengths > 0)
        if self.prioritized:
            weights = self._episode_weights(held)
            probs = weights / weights.sum()
            pick = self.rng.choice(len(held), size=batch_size, p=probs)
            importance = self._importance(probs[pick], len(held))
        else:
            pick = self.rng.integers(0, len(held), size=batch_size)
            importance = np.ones(batch_size, np.float32)
        slots = held[pick]
        length = int(self.lengths[slots].max())
        return self._gather(slots, np.zeros_like(slots), length, importance)

    def _transition_weights(self, flat: np.ndarray) -> npt.NDArray[np.float64]:
        """``p^alpha`` of the stored steps at the flat ``(slot, t)`` indices ``flat``."""
        assert self.arrays is not None
        return self.arrays["priority"].reshape(-1)[flat] ** self.alpha

    def _episode_weights(self, held: np.ndarray) -> npt.NDArray[np.float64]:
        """``(mean step priority)^alpha`` of the episodes in slots ``held``."""
        assert self.arrays is not None
        valid = self.valid_steps()[held]
        return ((self.arrays["priority"][held] * valid).sum(1) / valid.sum(1)) ** self.alpha

    def sampling_spread(self, whole_episodes: bool = False) -> dict[str, float]:
        """How far the draws of ``sample_episodes`` (``whole_episodes``) or
        ``sample_transitions`` are from uniform over what the store holds
        (``ops.replay_spread``); uniform sampling is at distance 0."""
        if not self.prioritized or self.arrays is None or len(self) == 0:
            return uniform_spread()
        if whole_episodes:
            return sampling_spread(self._episode_weights(np.flatnonzero(self.lengths > 0)))
        return sampling_spread(
            self._transition_weights(np.flatnonzero(self.valid_steps().reshape(-1)))
        )

    def _importance(self, probs: np.ndarray, population: int) -> npt.NDArray[np.float32]:
        weights = (population * probs) ** (-self.importance_beta)
        return (weights / weights.max()).astype(np.float32)

    def _gather(
        self, slots: np.ndarray, starts: np.ndarray, length: int, importance: np.ndarray
    ) -> SampledTeamBatch:
        assert self.arrays is not None
        steps = starts[:, None] + np.arange(length)[None, :]  # (B, L)
        mask = steps < self.lengths[slots][:, None]
        steps_clipped = np.minimum(steps, self.max_length - 1)
        obs_steps = np.minimum(
            starts[:, None] + np.arange(length + 1)[None, :], self.max_length
        )  # (B, L + 1); the row after an episode's last step is its final observation
        rows = slots[:, None]
        return SampledTeamBatch(
            obs=self.arrays["obs"][rows, obs_steps],
            state=self.arrays["state"][rows, obs_steps],
            actions=self.arrays["actions"][rows, steps_clipped],
            rewards=self.arrays["rewards"][rows, steps_clipped] * mask[..., None],
            terminated=self.arrays["terminated"][rows, steps_clipped] * mask,
            mask=mask.astype(np.float32),
            weights=importance.astype(np.float32),
            slots=slots.astype(np.int64),
            starts=starts.astype(np.int64),
            action_mask=(
                self.arrays["action_mask"][rows, obs_steps]
                if "action_mask" in self.arrays
                else None
            ),
            # Past an episode's end: 0 (obs_steps repeats the final row there).
            present=self.arrays["present"][rows, obs_steps]
            * (starts[:, None] + np.arange(length + 1)[None, :] <= self.lengths[slots][:, None])[
                ..., None
            ],
            agent_terminated=self.arrays["agent_terminated"][rows, steps_clipped] * mask[..., None],
        )

    def _require_data(self) -> None:
        if self.arrays is None or len(self) == 0:
            raise ValueError("the replay store is empty")

    # ---- priorities -------------------------------------------------------------------
    def update_priorities(self, batch: SampledTeamBatch, priorities: np.ndarray) -> None:
        """Blends ``priorities (B, L)`` (one per sampled step; padding ignored) into the
        stored ones of the steps ``batch`` was drawn from."""
        if not self.prioritized:
            return
        assert self.arrays is not None
        priorities = np.asarray(priorities, dtype=np.float64).reshape(batch.mask.shape)
        rows, cols = np.nonzero(batch.mask > 0)
        slots, steps = batch.slots[rows], batch.starts[rows] + cols
        new = np.maximum(priorities[rows, cols], 1e-6)
        stored = self.arrays["priority"]
        # Duplicate draws of one step: the last one wins, as in RLlib's segment trees.
        stored[slots, steps] = (1.0 - self.per_beta) * stored[slots, steps] + self.per_beta * new
        self.max_priority = max(self.max_priority, float(new.max(initial=0.0)))

    # ---- checkpoints ------------------------------------------------------------------
    def get_state(self) -> dict:
        return {
            # The written slots as views, not copies: a checkpoint pickles them at once,
            # and a copy of a full store would double its memory while saving.
            "arrays": (
                None
                if self.arrays is None
                else {k: v[: self.slots_written] for k, v in self.arrays.items()}
            ),
            "lengths": self.lengths.copy(),
            "next_slot": self.next_slot,
            "num_added": self.num_added,
            "max_priority": self.max_priority,
            "rng": self.rng.bit_generator.state,
        }

    def set_state(self, state: dict) -> None:
        arrays = state["arrays"]
        if arrays is not None and len(state["lengths"]) != self.capacity:
            raise ValueError(
                f"checkpointed store holds {len(state['lengths'])} episode slots, this "
                f"one {self.capacity} (buffer_size changed)"
            )
        self.lengths = np.array(state["lengths"], dtype=np.int64)
        self.next_slot = int(state["next_slot"])
        self.num_added = int(state["num_added"])
        arrays = None if arrays is None else {k: np.asarray(v) for k, v in arrays.items()}
        if arrays is not None and "present" not in arrays:
            # Stores checkpointed before absent agents: every agent acted on every step.
            c, t, n = arrays["rewards"].shape
            rows = np.arange(t + 1)[None, :] <= self.lengths[:c, None]
            arrays["present"] = np.repeat(rows[..., None], n, axis=2).astype(np.float32)
            arrays["agent_terminated"] = np.zeros((c, t, n), np.float32)
        # Checkpoints hold the written slots (older ones: every slot allocated then).
        self.arrays = (
            None if arrays is None else self._with_rows(arrays, arrays["rewards"].shape[1])
        )
        self.max_priority = float(state["max_priority"])
        self.rng.bit_generator.state = state["rng"]
