"""``ops.loops``: the first repeated state of an episode, literal cases and a loop."""

import itertools

import numpy as np

from marllib_ext.ops.loops import first_repeat, state_keys


def test_literal_cases():
    assert first_repeat([]) is None
    assert first_repeat(["a", "b", "c"]) is None
    assert first_repeat(["a", "b", "b", "b"]) == (1, 1)  # the state did not change
    assert first_repeat(["a", "b", "c", "b", "c"]) == (1, 2)  # back and forth
    assert first_repeat(["a", "b", "a", "b"]) == (0, 2)


def brute_force(keys):
    """The smallest j with keys[j] == keys[i] for some i < j."""
    for later in range(len(keys)):
        for earlier in range(later):
            if keys[earlier] == keys[later]:
                return earlier, later - earlier
    return None


def test_matches_the_pairwise_search():
    rng = np.random.default_rng(0)
    for length, alphabet in itertools.product((0, 1, 3, 8, 20), (2, 5, 40)):
        keys = list(rng.integers(0, alphabet, length))
        assert first_repeat(keys) == brute_force(keys)


def test_state_keys_are_equal_exactly_for_equal_rows():
    observations = np.array([[[0.0, 1.0], [2.0, 3.0]], [[0.0, 1.0], [2.0, 3.5]], [[0, 1], [2, 3]]])
    keys = state_keys(observations.astype(np.float32))
    assert keys[0] == keys[2] and keys[0] != keys[1]
    assert first_repeat(keys) == (0, 2)
