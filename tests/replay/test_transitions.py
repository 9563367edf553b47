"""The sum tree and the transition store: literal cases, draws against the probabilities
they promise (chi-square bounds with fixed seeds), priority blending against a slow
per-row reference, growth, the ring, memory and checkpoints."""

import numpy as np
import pytest

from marllib_ext.replay.sum_tree import SumTree
from marllib_ext.replay.transitions import MIN_ROWS, TransitionStore, bytes_needed


# ---- sum tree ------------------------------------------------------------------------------
def test_sum_tree_literal_case():
    tree = SumTree(5)  # 8 leaves
    tree.set([0, 1, 2, 3, 4], [1.0, 2.0, 0.0, 3.0, 4.0])
    assert tree.total == 10.0
    # cumulative: [1, 3, 3, 6, 10] -> mass m lands on the first i with cum_i > m
    found = tree.find([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99])
    np.testing.assert_array_equal(found, [0, 0, 1, 1, 3, 3, 4, 4])
    tree.set([3, 3], [5.0, 0.5])  # repeated index: the last weight wins
    assert tree.total == pytest.approx(7.5)
    np.testing.assert_array_equal(tree.get([3]), [0.5])


def test_sum_tree_of_one_entry_and_rounding_at_the_top():
    tree = SumTree(1)
    tree.set([0], [2.0])
    np.testing.assert_array_equal(tree.find([0.0, 1.999999]), [0, 0])
    tree = SumTree(3)
    tree.set([0, 1, 2], [0.1, 0.2, 0.0])
    # A mass at (or by rounding past) the total never lands on a zero-weight leaf.
    np.testing.assert_array_equal(tree.find([tree.total, tree.total * (1 + 1e-12)]), [1, 1])


@pytest.mark.parametrize("capacity", [7, 64, 1000])
def test_sum_tree_matches_a_cumulative_sum_reference(capacity):
    rng = np.random.default_rng(capacity)
    weights = rng.random(capacity) * (rng.random(capacity) > 0.3)
    tree = SumTree(capacity)
    tree.set(np.arange(capacity), weights)
    for _ in range(3):  # partial updates keep every node the sum of its children
        picked = rng.integers(0, capacity, 20)
        weights[picked] = rng.random(20)
        new = weights[picked].copy()
        for k, index in enumerate(picked):  # repeated picks: the last write wins
            weights[index] = new[k]
        tree.set(picked, new)
    mass = rng.random(500) * weights.sum()
    reference = np.searchsorted(np.cumsum(weights), mass, side="right")
    np.testing.assert_array_equal(tree.find(mass), reference)
    assert tree.total == pytest.approx(weights.sum())


def test_sum_tree_draws_follow_the_weights():
    weights = np.array([1.0, 0.0, 3.0, 6.0])
    tree = SumTree(4)
    tree.set(np.arange(4), weights)
    counts = np.bincount(tree.sample(40_000, np.random.default_rng(0)), minlength=4)
    expected = 40_000 * weights / weights.sum()
    assert counts[1] == 0
    chi2 = (((counts - expected) ** 2)[weights > 0] / expected[weights > 0]).sum()
    assert chi2 < 13.8  # 2 degrees of freedom, p = 0.001


def test_sum_tree_refuses_bad_input():
    tree = SumTree(4)
    with pytest.raises(IndexError):
        tree.set([4], [1.0])
    with pytest.raises(ValueError, match="finite"):
        tree.set([0], [np.nan])
    with pytest.raises(ValueError, match="all 0"):
        tree.sample(1, np.random.default_rng(0))


# ---- transition store ----------------------------------------------------------------------
def rows(start, n, obs_dim=3):
    values = np.arange(start, start + n, dtype=np.float32)
    return {
        "obs": np.repeat(values[:, None], obs_dim, axis=1),
        "actions": values.astype(np.int64),
        "rewards": values,
    }


def test_store_grows_with_what_is_stored_then_rings():
    store = TransitionStore(5000)
    store.add(rows(0, 10))
    assert store.arrays["obs"].shape == (MIN_ROWS, 3)
    store.add(rows(10, 1500))
    assert store.arrays["obs"].shape == (2048, 3)
    store.add(rows(1510, 4000))
    assert store.arrays["obs"].shape == (5000, 3) and len(store) == 5000
    # The ring: the oldest 510 rows were overwritten by the newest.
    held = np.sort(store.arrays["rewards"])
    np.testing.assert_array_equal(held, np.arange(510, 5510, dtype=np.float32))
    assert store.bytes_at_capacity() == 5000 * (12 + 8 + 4 + 8)
    assert bytes_needed(5000, rows(0, 1), prioritized=True) == 5000 * 32 + 16 * 8192


def test_store_adds_more_rows_than_capacity_keeping_the_newest():
    store = TransitionStore(4)
    store.add(rows(0, 10))
    np.testing.assert_array_equal(np.sort(store.arrays["rewards"]), [6, 7, 8, 9])
    assert store.num_added == 10 and len(store) == 4


def test_store_refuses_mismatched_columns():
    store = TransitionStore(10)
    with pytest.raises(ValueError, match="same number of rows"):
        store.add({"obs": np.zeros((2, 3)), "rewards": np.zeros(3)})
    store.add(rows(0, 2))
    with pytest.raises(ValueError, match="differ from stored"):
        store.add({"obs": np.zeros((2, 3))})
    with pytest.raises(ValueError, match="shape"):
        store.add({**rows(0, 2), "obs": np.zeros((2, 4), np.float32)})


def test_uniform_sample_returns_k_minibatches_of_stored_rows():
    store = TransitionStore(100, seed=0)
    store.add(rows(0, 30))
    sampled = store.sample(num_batches=4, batch_size=8)
    assert sampled.columns["obs"].shape == (32, 3)
    np.testing.assert_array_equal(sampled.columns["rewards"], sampled.indices.astype(np.float32))
    np.testing.assert_array_equal(sampled.weights, np.ones(32, np.float32))
    assert sampled.indices.max() < 30


def test_prioritized_draws_follow_p_to_the_alpha():
    store = TransitionStore(4, prioritized=True, alpha=0.5, seed=0)
    store.add(rows(0, 4))
    first = store.sample(1, 4)
    store.update_priorities(np.arange(4), [1.0, 4.0, 9.0, 0.0])  # per_beta 1: replace
    sampled = store.sample(num_batches=50, batch_size=1000)
    counts = np.bincount(sampled.indices, minlength=4)
    probs = np.array([1.0, 2.0, 3.0, 1e-3]) / 6.001  # sqrt of p, the floor for 0
    expected = 50_000 * probs
    chi2 = (((counts - expected) ** 2) / expected)[:3].sum()
    assert chi2 < 13.8
    assert first.indices.shape == (4,)


def test_sampling_spread_reads_the_weights_of_the_held_rows():
    store = TransitionStore(8, prioritized=True, alpha=0.5, seed=0)
    store.add(rows(0, 4))  # 4 of 8 held, all at the max priority: uniform
    assert store.sampling_spread()["total_variation"] == pytest.approx(0.0)
    store.update_priorities(np.arange(4), [1.0, 4.0, 9.0, 0.0])
    # weights sqrt(p) = [1, 2, 3, 1e-3] over the 4 held rows, not the 8 slots.
    q = np.array([1.0, 2.0, 3.0, 1e-3]) / 6.001
    spread = store.sampling_spread()
    assert spread["total_variation"] == pytest.approx(0.5 * np.abs(q - 0.25).sum())
    assert spread["max_over_mean"] == pytest.approx(3.0 / (6.001 / 4))
    uniform = TransitionStore(8, seed=0)
    uniform.add(rows(0, 4))
    assert uniform.sampling_spread()["effective_fraction"] == 1.0


def test_importance_weights_literal_case():
    store = TransitionStore(2, prioritized=True, alpha=1.0, importance_beta=1.0, seed=0)
    store.add(rows(0, 2))
    store.update_priorities([0, 1], [1.0, 3.0])
    sampled = store.sample(num_batches=20, batch_size=50)
    # P = (0.25, 0.75): (N P)^-1 = (2, 2/3), divided by each minibatch's largest.
    weights = sampled.weights.reshape(20, 50)
    indices = sampled.indices.reshape(20, 50)
    for k in range(20):
        largest = 2.0 if (indices[k] == 0).any() else 2.0 / 3.0
        want = np.where(indices[k] == 0, 2.0, 2.0 / 3.0) / largest
        np.testing.assert_allclose(weights[k], want, rtol=1e-6)


def test_priority_blending_matches_a_slow_reference():
    rng = np.random.default_rng(3)
    store = TransitionStore(50, prioritized=True, alpha=0.7, per_beta=0.3, seed=1)
    store.add(rows(0, 50))
    reference = np.ones(50)
    largest = 1.0
    for _ in range(5):
        sampled = store.sample(num_batches=3, batch_size=16)
        new = rng.random(48) * 5
        blended = {}
        for index, value in zip(sampled.indices, new, strict=True):  # last draw wins
            blended[index] = 0.7 * reference[index] + 0.3 * max(value, 1e-6)
        for index, value in blended.items():
            reference[index] = value
        largest = max(largest, new.max())
        store.update_priorities(sampled.indices, new)
        np.testing.assert_allclose(store.priority[:50], reference)
        np.testing.assert_allclose(store.tree.get(np.arange(50)), reference**0.7)
    # New rows enter at the largest priority seen.
    store2_index = store.add(rows(50, 1))
    assert store.priority[store2_index[0]] == pytest.approx(largest)


def test_update_refuses_non_finite_or_misshapen_priorities():
    store = TransitionStore(10, prioritized=True)
    store.add(rows(0, 4))
    with pytest.raises(ValueError, match="finite"):
        store.update_priorities([0, 1], [1.0, np.nan])
    with pytest.raises(ValueError, match="2 priorities for 3"):
        store.update_priorities([0, 1, 2], [1.0, 2.0])


@pytest.mark.parametrize("include_rows", [True, False])
def test_checkpoint_round_trip(include_rows):
    store = TransitionStore(100, prioritized=True, alpha=0.6, per_beta=0.5, seed=0)
    store.add(rows(0, 60))
    sampled = store.sample(2, 10)
    store.update_priorities(sampled.indices, np.linspace(0.1, 5, 20))
    state = store.get_state(include_rows=include_rows)
    restored = TransitionStore(100, prioritized=True, alpha=0.6, per_beta=0.5, seed=99)
    restored.set_state(state)
    assert restored.max_priority == store.max_priority
    if include_rows:
        assert len(restored) == 60
        np.testing.assert_array_equal(restored.priority[:60], store.priority[:60])
        np.testing.assert_allclose(restored.tree.total, store.tree.total)
        a, b = store.sample(1, 30), restored.sample(1, 30)  # same rng state: same draws
        np.testing.assert_array_equal(a.indices, b.indices)
    else:
        assert len(restored) == 0 and restored.arrays is None
    with pytest.raises(ValueError, match="buffer_capacity"):
        TransitionStore(50).set_state(state)
