"""block_gae: every world's column as team_gae and as the slow definition, and a
hand-computed block."""

import numpy as np
import pytest

from marllib_ext.ops import block_gae, team_gae
from tests.ops.test_advantages import slow_team_gae


def random_block(rng, horizon=12, worlds=5):
    rewards = rng.normal(size=(horizon, worlds))
    values = rng.normal(size=(horizon, worlds))
    ends = rng.random((horizon, worlds)) < 0.2
    terminated_kind = rng.random((horizon, worlds)) < 0.5
    # The next step's value, or a bootstrap V(final obs) where the episode ended.
    next_values = np.concatenate([values[1:], rng.normal(size=(1, worlds))])
    next_values = np.where(ends, rng.normal(size=(horizon, worlds)), next_values)
    return rewards, values, next_values, ends & terminated_kind, ends & ~terminated_kind


@pytest.mark.parametrize("gamma,lambda_", [(0.99, 0.95), (0.9, 0.0), (1.0, 1.0)])
@pytest.mark.parametrize("seed", range(4))
def test_each_world_as_team_gae_and_the_slow_reference(seed, gamma, lambda_):
    rewards, values, next_values, terminateds, truncateds = random_block(
        np.random.default_rng(seed)
    )
    advantages, targets = block_gae(
        rewards, values, next_values, terminateds, truncateds, gamma=gamma, lambda_=lambda_
    )
    assert advantages.shape == targets.shape == rewards.shape
    for world in range(rewards.shape[1]):
        column = [a[:, world] for a in (rewards, values, next_values, terminateds, truncateds)]
        expected, expected_targets = team_gae(*column, gamma=gamma, lambda_=lambda_)
        np.testing.assert_allclose(advantages[:, world], expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(targets[:, world], expected_targets, rtol=1e-5, atol=1e-5)
        column[0] = column[0][:, None]  # the slow reference sums over agents
        slow, _ = slow_team_gae(*column, gamma, lambda_)
        np.testing.assert_allclose(advantages[:, world], slow, rtol=1e-5, atol=1e-5)


def test_hand_computed_block():
    """Two worlds, three steps, gamma 0.5, lambda 1. World 0 terminates at t=1 and
    starts a new episode at t=2; world 1 runs on and is cut by the sampler at t=2."""
    rewards = np.array([[1.0, 0.0], [2.0, 1.0], [0.0, 1.0]])
    values = np.array([[1.0, 2.0], [1.0, 2.0], [4.0, 2.0]])
    next_values = np.array([[1.0, 2.0], [9.0, 2.0], [2.0, 6.0]])
    terminateds = np.array([[False, False], [True, False], [False, False]])
    truncateds = np.zeros((3, 2), bool)
    advantages, targets = block_gae(
        rewards, values, next_values, terminateds, truncateds, gamma=0.5, lambda_=1.0
    )
    # World 0: delta = [1 + 0.5 - 1, 2 - 1, 0 + 1 - 4] = [0.5, 1, -3]; the episode
    # ends at t=1, so A = [0.5 + 0.5 * 1, 1, -3].
    # World 1: delta = [0 + 1 - 2, 1 + 1 - 2, 1 + 3 - 2] = [-1, 0, 2];
    # A_2 = 2, A_1 = 0 + 0.5 * 2 = 1, A_0 = -1 + 0.5 * 1 = -0.5.
    np.testing.assert_allclose(advantages, [[1.0, -0.5], [1.0, 1.0], [-3.0, 2.0]])
    np.testing.assert_allclose(targets, advantages + values)


def test_names_the_array_of_the_wrong_shape():
    zeros = np.zeros((3, 2))
    with pytest.raises(ValueError, match="truncateds"):
        block_gae(zeros, zeros, zeros, zeros.astype(bool), np.zeros(3, bool), gamma=1, lambda_=1)
