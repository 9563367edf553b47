"""Rows of agent steps cut into zero-padded sequences for recurrent modules (no Ray
import): the data chunks of recurrent MAPPO (Yu et al. 2022, ``data_chunk_length``) in
RLlib's learner layout (``[N, L, ...]`` columns, ``seq_lens``, a ``[N, L]`` loss mask).

A segment is a run of one agent's consecutive steps in one episode; each is cut into
sequences of at most ``max_len`` steps, and a sequence starts from the recurrent state
recorded at its first step (the initial state where its episode starts)."""

from __future__ import annotations

import numpy as np


def sequence_layout(new_segment: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``0 .. R-1`` (in order) as sequences of consecutive rows.

    A sequence starts at every row where ``new_segment`` is true and after every
    ``max_len`` rows of a segment: with ``s`` the segment of row ``r`` and ``p`` its
    position there, row ``r`` goes to sequence ``cumsum(p % max_len == 0) - 1`` at
    position ``p % max_len``.

    Args:
        new_segment: ``(R,)`` bool, the row starts a segment (``new_segment[0]`` must be
            true).
        max_len: the longest sequence ``L``.

    Returns:
        ``index``: ``(N, L)`` int64, the row at each position (0 on padding);
        ``valid``: ``(N, L)`` bool, the position holds a row.
    """
    new_segment = np.asarray(new_segment, bool)
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    rows = len(new_segment)
    if rows == 0:
        return np.zeros((0, max_len), np.int64), np.zeros((0, max_len), bool)
    if not new_segment[0]:
        raise ValueError("new_segment[0] must be true: the first row starts a segment")
    row = np.arange(rows)
    segment_start = np.maximum.accumulate(np.where(new_segment, row, 0))
    position = row - segment_start
    starts = position % max_len == 0
    sequence = np.cumsum(starts) - 1
    index = np.zeros((int(sequence[-1]) + 1, max_len), np.int64)
    valid = np.zeros(index.shape, bool)
    index[sequence, position % max_len] = row
    valid[sequence, position % max_len] = True
    return index, valid


def segment_starts(
    keys: list[np.ndarray], steps: np.ndarray, episode_starts: np.ndarray | None
) -> np.ndarray:
    """``(R,)`` bool: row ``r`` starts a segment. Rows are ordered by ``keys`` (arrays
    naming whose steps they are, e.g. block, world, agent) and then ``steps``; a row
    starts a segment where its keys differ from the previous row's, where its step does
    not follow the previous row's (the agent was absent in between), or where its
    episode starts (``episode_starts``, ``None``: nowhere)."""
    steps = np.asarray(steps)
    rows = len(steps)
    new = np.ones(rows, bool)
    if rows > 1:
        same = np.ones(rows - 1, bool)
        for key in keys:
            same &= key[1:] == key[:-1]
        new[1:] = ~same | (steps[1:] != steps[:-1] + 1)
    if episode_starts is not None:
        new |= np.asarray(episode_starts, bool)
    return new


def gather_sequences(array: np.ndarray, index: np.ndarray, valid: np.ndarray, fill=0):
    """``(N, L, ...)`` ``array[index]`` (rows ``(R, ...)``) with ``fill`` on padding."""
    out = np.asarray(array)[index]
    mask = valid.reshape(*valid.shape, *[1] * (out.ndim - 2))
    return np.where(mask, out, np.asarray(fill, out.dtype))


def scatter_sequences(values: np.ndarray, index: np.ndarray, valid: np.ndarray, rows: int):
    """``(R, ...)`` rows of ``(N, L, ...)`` sequence ``values``: the inverse of
    ``gather_sequences`` on the valid positions."""
    out = np.zeros((rows, *values.shape[2:]), values.dtype)
    out[index[valid]] = values[valid]
    return out


def unroll_segments(lengths: np.ndarray, total_steps: int, segment_cost: float) -> list[tuple]:
    """Time segments for unrolling padded sequences of ``lengths`` real steps without the
    padding's arithmetic.

    Segment ``k`` covers steps ``[t_k, t_{k+1})`` and runs only the ``n(t_k)`` sequences
    longer than ``t_k``, ``n(t) = #{b : lengths_b > t}``; the state a sequence ends a
    segment with starts it in the next. The cuts ``0 = t_0 < ... < t_K = T`` minimize

        sum_k n(t_k) (t_{k+1} - t_k) + segment_cost * K

    (row-steps unrolled, plus each call's fixed cost in row-steps), by dynamic
    programming over cuts at the lengths: between two lengths ``n`` is constant, so a cut
    there costs no less than at the length before it.

    Args:
        lengths: ``(B,)`` real steps of each sequence (``0 <= lengths_b <= T``).
        total_steps: ``T``, the padded length.
        segment_cost: the fixed cost of one more segment, in row-steps.

    Returns:
        ``[(t_k, t_{k+1}, n(t_k)), ...]`` in time order, up to the longest sequence's
        end (none when every length is 0). The ``n(t_k)`` sequences are the first
        ``n(t_k)`` of ``lengths`` sorted in descending order.
    """
    lengths = np.asarray(lengths, np.int64)
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if not 0.0 <= segment_cost < float("inf"):
        raise ValueError(f"segment_cost must be finite and >= 0, got {segment_cost}")
    if lengths.size and (lengths.min() < 0 or lengths.max() > total_steps):
        raise ValueError(
            f"lengths must lie in [0, {total_steps}], got {lengths.min()}..{lengths.max()}"
        )
    end = int(lengths.max(initial=0))  # no sequence runs past the longest
    if end == 0:
        return []
    cuts = np.unique(np.concatenate([[0], lengths[lengths < end], [end]]))
    rows = (lengths[None, :] > cuts[:, None]).sum(1)  # n(t) at each candidate cut, > 0
    count = len(cuts)
    best = np.zeros(count)  # best[i]: least cost of unrolling from cuts[i] to the end
    following = np.full(count, count - 1)
    for i in range(count - 2, -1, -1):
        later = np.arange(i + 1, count)
        cost = rows[i] * (cuts[later] - cuts[i]) + segment_cost + best[later]
        pick = int(np.argmin(cost))
        best[i], following[i] = cost[pick], later[pick]
    segments, i = [], 0
    while i < count - 1:
        j = int(following[i])
        segments.append((int(cuts[i]), int(cuts[j]), int(rows[i])))
        i = j
    return segments
