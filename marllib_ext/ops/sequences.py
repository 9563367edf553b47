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
