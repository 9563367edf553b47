from itertools import pairwise

import numpy as np
import pytest

from marllib_ext.ops.sequences import (
    gather_sequences,
    scatter_sequences,
    segment_starts,
    sequence_layout,
    unroll_segments,
)


def slow_layout(new_segment, max_len):
    """Walks the rows one by one: a new sequence at a segment start or a full one."""
    sequences = []
    for row, new in enumerate(new_segment):
        if new or len(sequences[-1]) == max_len:
            sequences.append([])
        sequences[-1].append(row)
    index = np.zeros((len(sequences), max_len), np.int64)
    valid = np.zeros(index.shape, bool)
    for n, rows in enumerate(sequences):
        index[n, : len(rows)] = rows
        valid[n, : len(rows)] = True
    return index, valid


def test_literal_layout():
    # segments [0, 1, 2, 3, 4] and [5, 6], sequences of at most 2
    index, valid = sequence_layout(np.array([1, 0, 0, 0, 0, 1, 0], bool), 2)
    assert index.tolist() == [[0, 1], [2, 3], [4, 0], [5, 6]]
    assert valid.tolist() == [[True, True], [True, True], [True, False], [True, True]]


@pytest.mark.parametrize("max_len", [1, 3, 10])
def test_layout_against_loop(max_len):
    rng = np.random.default_rng(max_len)
    new = rng.random(200) < 0.1
    new[0] = True
    index, valid = sequence_layout(new, max_len)
    expected_index, expected_valid = slow_layout(new, max_len)
    np.testing.assert_array_equal(index, expected_index)
    np.testing.assert_array_equal(valid, expected_valid)
    # every row once, in order
    assert sorted(index[valid].tolist()) == list(range(200))


def test_layout_refuses_a_first_row_inside_a_segment():
    with pytest.raises(ValueError, match="new_segment"):
        sequence_layout(np.array([False, True]), 4)
    with pytest.raises(ValueError, match="max_len"):
        sequence_layout(np.array([True]), 0)


def test_empty_layout():
    index, valid = sequence_layout(np.zeros(0, bool), 4)
    assert index.shape == valid.shape == (0, 4)


def test_segment_starts():
    worlds = np.array([0, 0, 0, 0, 1, 1])
    steps = np.array([0, 1, 3, 4, 4, 5])  # an absence between steps 1 and 3
    starts = np.array([0, 0, 0, 1, 0, 0], bool)  # a new episode at row 3
    assert segment_starts([worlds], steps, starts).tolist() == [1, 0, 1, 1, 1, 0]
    assert segment_starts([worlds], steps, None).tolist() == [1, 0, 1, 0, 1, 0]


def test_gather_and_scatter_invert():
    rng = np.random.default_rng(0)
    new = rng.random(50) < 0.2
    new[0] = True
    index, valid = sequence_layout(new, 4)
    rows = rng.normal(size=(50, 3))
    sequences = gather_sequences(rows, index, valid)
    assert sequences.shape == (len(index), 4, 3)
    assert (sequences[~valid] == 0).all()
    np.testing.assert_array_equal(scatter_sequences(sequences, index, valid, 50), rows)
    masks = gather_sequences(np.zeros((50, 2), bool), index, valid, fill=True)
    assert masks[~valid].all() and not masks[valid].any()


def brute_force_least_cost(lengths, segment_cost):
    """Every set of cut times in ``1 .. max - 1``, each segment running the sequences
    longer than its start."""
    lengths = np.asarray(lengths)
    end = int(lengths.max())
    best = None
    for mask in range(2 ** max(end - 1, 0)):
        cuts = [0] + [t for t in range(1, end) if mask >> (t - 1) & 1] + [end]
        cost = sum(int((lengths > a).sum()) * (b - a) + segment_cost for a, b in pairwise(cuts))
        best = cost if best is None else min(best, cost)
    return best


def test_literal_unroll_segments():
    # free segments: one per distinct length, each over the sequences still running
    assert unroll_segments(np.array([5, 5, 2, 1]), 5, 0.0) == [(0, 1, 4), (1, 2, 3), (2, 5, 2)]
    # a segment dearer than the padding it saves: one unroll of every sequence
    assert unroll_segments(np.array([5, 5, 2, 1]), 5, 100.0) == [(0, 5, 4)]
    # 8 sequences of 4 and one of 2, a segment costs 1: 9 * 2 + 8 * 2 + 2 = 36 < 36 + 1
    assert unroll_segments(np.array([4] * 8 + [2]), 6, 1.0) == [(0, 2, 9), (2, 4, 8)]
    # no unroll past the longest sequence, none at all without a real step
    assert unroll_segments(np.array([3, 0]), 6, 0.0) == [(0, 3, 1)]
    assert unroll_segments(np.array([0, 0]), 6, 1.0) == []
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, 4\]"):
        unroll_segments(np.array([5]), 4, 1.0)
    with pytest.raises(ValueError, match="segment_cost must be finite"):
        unroll_segments(np.array([5]), 5, float("inf"))
    # a segment dearer than any padding: one unroll
    assert unroll_segments(np.array([9, 1, 1, 1]), 9, 1e12) == [(0, 9, 4)]


@pytest.mark.parametrize("seed", range(40))
def test_unroll_segments_reach_the_least_cost_of_every_cut(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 9, size=int(rng.integers(1, 12)))
    lengths[0] = max(lengths[0], 1)
    segment_cost = float(rng.choice([0.0, 0.5, 2.0, 7.0, 50.0]))
    segments = unroll_segments(lengths, 8, segment_cost)
    # contiguous from 0 to the longest sequence, each over the sequences running then
    assert segments[0][0] == 0 and segments[-1][1] == lengths.max()
    assert all(a[1] == b[0] for a, b in pairwise(segments))
    assert all(n == int((lengths > start).sum()) for start, _, n in segments)
    cost = sum(n * (stop - start) + segment_cost for start, stop, n in segments)
    assert cost == pytest.approx(brute_force_least_cost(lengths, segment_cost))
