"""A replay store of single transitions in numpy arrays, with a sum tree for prioritized
draws (numpy, no Ray): the off-policy fast path's buffer.

Rows are whatever columns the caller adds (``obs``, ``actions``, ``rewards``,
``next_obs``, ``terminateds``, ...), one row per transition, all columns the same
number of rows. Arrays start small and double until they hold ``capacity`` rows, so
memory follows what is stored; after that the store is a ring and the oldest row is
overwritten. ``nbytes`` is what the arrays hold now, ``bytes_at_capacity`` what they
will hold when full.

Sampling ``sample(num_batches=K, batch_size=B)`` draws ``K * B`` rows at once, every
draw from the priorities as they are at the call: minibatch ``k`` does not see the
priorities minibatch ``k - 1``'s update would write (they are written back once, by
``update_priorities``, after all ``K`` updates). With ``K = 1`` this is PER's
draw-update cycle.

Priorities (as ``replay/team_episodes.py``): row ``i`` is drawn with probability
``p_i^alpha / sum_j p_j^alpha``; a new row enters at the largest priority seen;
``update_priorities`` blends ``p <- (1 - per_beta) p + per_beta p_new`` (ROER's EMA;
``per_beta = 1`` replaces as PER does); importance weights ``(N P(i))^-beta``, divided
by their largest value within each minibatch of ``B`` rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from marllib_ext.errors import ConfigError
from marllib_ext.ops.replay_spread import sampling_spread, uniform_spread
from marllib_ext.replay.sum_tree import SumTree

MIN_ROWS = 1024  # first allocation; doubled until capacity
MIN_PRIORITY = 1e-6


def available_memory_bytes() -> int:
    """Memory the system can still give (Linux ``MemAvailable``; elsewhere free pages)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def refuse_past_memory(needed: int, setting: str, what: str) -> None:
    """``ConfigError`` naming ``setting`` (``"buffer_size=5000"``) when ``needed`` bytes
    (``what`` says of which store) exceed the memory still available."""
    available = available_memory_bytes()
    if needed > available:
        raise ConfigError(
            f"{setting}: {what} need {needed / 2**30:.2f} GiB when full and "
            f"{available / 2**30:.2f} GiB is available; lower {setting.split('=')[0]}"
        )


def bytes_needed(capacity: int, columns: dict[str, np.ndarray], prioritized: bool) -> int:
    """Bytes a full store of ``capacity`` rows shaped like ``columns`` holds: the rows,
    one float64 priority per row and, with priorities, the sum tree."""
    row = sum(np.asarray(value)[0].nbytes for value in columns.values())
    tree = 16 * (1 << max(0, (capacity - 1).bit_length())) if prioritized else 0
    return capacity * (row + 8) + tree


@dataclass(frozen=True)
class SampledTransitions:
    """``K * B`` rows: ``columns[name]`` of shape ``(K * B, ...)`` with minibatch ``k``
    at rows ``k * B : (k + 1) * B``; ``indices (K * B,)`` locate them in the store;
    ``weights (K * B,)`` are importance weights (ones without priorities)."""

    columns: dict[str, np.ndarray]
    indices: npt.NDArray[np.int64]
    weights: npt.NDArray[np.float32]
    num_batches: int
    batch_size: int


class PrioritizedRing:
    """What both replay stores share: ``capacity`` units in a ring, the priority
    settings (``alpha``, ``importance_beta``, ``per_beta``; see the module docstring),
    the sampler's generator and the counters."""

    unit = "item"

    def __init__(
        self,
        capacity: int,
        *,
        prioritized: bool = False,
        alpha: float = 1.0,
        importance_beta: float = 0.0,
        per_beta: float = 1.0,
        seed: int | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 {self.unit}, got {capacity}")
        if not 0 < per_beta <= 1:
            raise ValueError(f"per_beta must be in (0, 1], got {per_beta}")
        self.capacity = int(capacity)
        self.prioritized = prioritized
        self.alpha, self.importance_beta, self.per_beta = alpha, importance_beta, per_beta
        self.rng = np.random.default_rng(seed)
        self.arrays: dict[str, np.ndarray] | None = None
        self.num_added = 0
        self.max_priority = 1.0

    def __len__(self) -> int:
        """Units held."""
        return int(min(self.num_added, self.capacity))


class TransitionStore(PrioritizedRing):
    """Ring buffer of ``capacity`` transitions (see the module docstring)."""

    unit = "transition"

    def __init__(self, capacity: int, **priorities) -> None:
        super().__init__(capacity, **priorities)
        self.next_index = 0
        self.priority = np.zeros(0, np.float64)  # raw p, grown with the arrays
        self.tree = SumTree(self.capacity) if self.prioritized else None

    # ---- memory -----------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        arrays = 0 if self.arrays is None else sum(a.nbytes for a in self.arrays.values())
        tree = 0 if self.tree is None else self.tree.tree.nbytes
        return arrays + self.priority.nbytes + tree

    def bytes_at_capacity(self) -> int:
        """Bytes of the arrays once ``capacity`` rows are held (0 before any row)."""
        if self.arrays is None:
            return 0
        return bytes_needed(self.capacity, self.arrays, self.prioritized)

    # ---- adding -----------------------------------------------------------------------
    def add(self, columns: dict[str, np.ndarray]) -> npt.NDArray[np.int64]:
        """Appends ``n`` rows (every column ``(n, ...)``); returns their indices."""
        arrays = {name: np.asarray(value) for name, value in columns.items()}
        counts = {name: value.shape[0] for name, value in arrays.items()}
        n = next(iter(counts.values()))
        if any(count != n for count in counts.values()):
            raise ValueError(f"every column needs the same number of rows, got {counts}")
        if self.arrays is not None and set(arrays) != set(self.arrays):
            raise ValueError(f"columns {sorted(arrays)} differ from stored {sorted(self.arrays)}")
        if n == 0:
            return np.zeros(0, np.int64)
        if n > self.capacity:  # only the newest capacity rows survive the ring
            arrays = {name: value[-self.capacity :] for name, value in arrays.items()}
            self.num_added += n - self.capacity
            n = self.capacity
        indices = (self.next_index + np.arange(n)) % self.capacity
        self._ensure_rows(arrays, int(indices.max()) + 1)
        assert self.arrays is not None
        for name, value in arrays.items():
            self.arrays[name][indices] = value
        self.next_index = int((self.next_index + n) % self.capacity)
        self.num_added += n
        if self.prioritized:
            self.priority[indices] = self.max_priority
            self.tree.set(indices, self.max_priority**self.alpha)
        return indices

    def _ensure_rows(self, example: dict[str, np.ndarray], rows: int) -> None:
        held = 0 if self.arrays is None else len(self.priority)
        if rows <= held:
            return
        size = min(self.capacity, max(MIN_ROWS, rows, 2 * held))
        grown = {}
        for name, value in example.items():
            array = np.zeros((size, *value.shape[1:]), value.dtype)
            if self.arrays is not None:
                if self.arrays[name].shape[1:] != value.shape[1:]:
                    raise ValueError(
                        f"column {name!r}: rows of shape {value.shape[1:]}, stored "
                        f"{self.arrays[name].shape[1:]}"
                    )
                array[:held] = self.arrays[name]
            grown[name] = array
        self.arrays = grown
        priority = np.zeros(size, np.float64)
        priority[:held] = self.priority
        self.priority = priority

    # ---- sampling ---------------------------------------------------------------------
    def sample(self, num_batches: int, batch_size: int) -> SampledTransitions:
        """``num_batches * batch_size`` rows drawn at once (see the module docstring)."""
        if self.arrays is None or len(self) == 0:
            raise ValueError("the replay store is empty")
        if num_batches < 1 or batch_size < 1:
            raise ValueError(f"need num_batches, batch_size >= 1, got {num_batches}, {batch_size}")
        total = num_batches * batch_size
        if self.prioritized:
            indices = self.tree.sample(total, self.rng)
            probs = self.tree.get(indices) / self.tree.total
            weights = (len(self) * probs) ** (-self.importance_beta)
            per_batch = weights.reshape(num_batches, batch_size)
            weights = (per_batch / per_batch.max(axis=1, keepdims=True)).reshape(-1)
        else:
            indices = self.rng.integers(0, len(self), size=total)
            weights = np.ones(total)
        return SampledTransitions(
            columns={name: array[indices] for name, array in self.arrays.items()},
            indices=indices.astype(np.int64),
            weights=weights.astype(np.float32),
            num_batches=num_batches,
            batch_size=batch_size,
        )

    # ---- priorities -------------------------------------------------------------------
    def sampling_spread(self) -> dict[str, float]:
        """How far the draws are from uniform over the held rows
        (``ops.replay_spread``); uniform sampling is at distance 0."""
        if not self.prioritized or len(self) == 0:
            return uniform_spread()
        return sampling_spread(self.tree.get(np.arange(len(self))))

    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> None:
        """Blends ``priorities`` into the stored ones of the rows ``indices`` (both flat,
        in the order ``sample`` returned them); for a row drawn twice the last wins."""
        if not self.prioritized:
            return
        indices = np.asarray(indices, np.int64).reshape(-1)
        new = np.asarray(priorities, np.float64).reshape(-1)
        if new.shape != indices.shape:
            raise ValueError(f"{new.size} priorities for {indices.size} sampled rows")
        if not np.all(np.isfinite(new)):
            raise ValueError("priorities must be finite")
        new = np.maximum(new, MIN_PRIORITY)
        blended = (1.0 - self.per_beta) * self.priority[indices] + self.per_beta * new
        self.priority[indices] = blended
        # The stored value of the last draw of each row (numpy keeps the last write).
        self.tree.set(indices, self.priority[indices] ** self.alpha)
        self.max_priority = max(self.max_priority, float(new.max(initial=0.0)))

    # ---- checkpoints ------------------------------------------------------------------
    def get_state(self, include_rows: bool = True) -> dict:
        """The store's state; ``include_rows=False`` keeps priorities and counters but
        not the rows (a checkpoint without the replay contents starts empty)."""
        held = len(self) if include_rows else 0
        return {
            "capacity": self.capacity,
            "arrays": (
                None
                if self.arrays is None or not include_rows
                # Views: a checkpoint pickles them at once; a copy would double
                # the store's memory while saving.
                else {k: v[:held] for k, v in self.arrays.items()}
            ),
            "priority": self.priority[:held].copy(),
            "next_index": self.next_index if include_rows else 0,
            "num_added": self.num_added if include_rows else 0,
            "max_priority": self.max_priority,
            "rng": self.rng.bit_generator.state,
        }

    def set_state(self, state: dict) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"checkpointed store holds {state['capacity']} transitions, this one "
                f"{self.capacity} (buffer_capacity changed)"
            )
        arrays = state["arrays"]
        self.arrays, self.priority = None, np.zeros(0, np.float64)
        held = len(state["priority"])
        if arrays and held:
            self._ensure_rows({k: np.asarray(v) for k, v in arrays.items()}, held)
            assert self.arrays is not None
            for name, value in arrays.items():
                self.arrays[name][:held] = value
            self.priority[:held] = state["priority"]
        self.next_index = int(state["next_index"])
        self.num_added = int(state["num_added"])
        self.max_priority = float(state["max_priority"])
        self.rng.bit_generator.state = state["rng"]
        if self.tree is not None:
            self.tree = SumTree(self.capacity)
            held = len(self)
            self.tree.set(np.arange(held), self.priority[:held] ** self.alpha)
