"""team_gae against a slow reference, closed forms and invariants."""

import numpy as np
import pytest

from marllib_ext.ops import team_gae


def slow_team_gae(rewards, values, next_values, terminateds, truncateds, gamma, lambda_):
    """Definition by explicit sums: A_t = sum_{l>=0} (gamma*lambda)^l delta_{t+l} in-segment."""
    team = np.asarray(rewards, float).sum(axis=1)
    horizon = len(team)
    deltas = [
        team[t] + (0.0 if terminateds[t] else gamma * next_values[t]) - values[t]
        for t in range(horizon)
    ]
    advantages = np.zeros(horizon)
    for t in range(horizon):
        total, weight = 0.0, 1.0
        for k in range(t, horizon):
            total += weight * deltas[k]
            if terminateds[k] or truncateds[k]:
                break
            weight *= gamma * lambda_
        advantages[t] = total
    return advantages, advantages + np.asarray(values)


def random_case(rng, horizon=40, n_agents=3, n_ends=4):
    rewards = rng.normal(size=(horizon, n_agents))
    values = rng.normal(size=horizon)
    next_values = np.append(values[1:], rng.normal())
    ends = np.zeros(horizon, bool)
    ends[rng.choice(horizon - 1, size=n_ends, replace=False)] = True
    ends[-1] = True
    terminated_kind = rng.random(horizon) < 0.5
    terminateds = ends & terminated_kind
    truncateds = ends & ~terminated_kind
    # After a segment end the next value is a bootstrap V(final obs), not values[t+1].
    next_values = np.where(ends, rng.normal(size=horizon), next_values)
    return rewards, values, next_values, terminateds, truncateds


@pytest.mark.parametrize("gamma,lambda_", [(0.99, 0.95), (0.9, 0.0), (1.0, 1.0), (0.5, 0.7)])
@pytest.mark.parametrize("seed", range(5))
def test_matches_slow_reference(seed, gamma, lambda_):
    case = random_case(np.random.default_rng(seed))
    advantages, targets = team_gae(*case, gamma=gamma, lambda_=lambda_)
    ref_advantages, ref_targets = slow_team_gae(*case, gamma, lambda_)
    np.testing.assert_allclose(advantages, ref_advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, ref_targets, rtol=1e-5, atol=1e-5)


def test_lambda_zero_gives_td_residual():
    rewards, values, next_values, terminateds, truncateds = random_case(np.random.default_rng(1))
    advantages, _ = team_gae(
        rewards, values, next_values, terminateds, truncateds, gamma=0.9, lambda_=0.0
    )
    td = rewards.sum(1) + 0.9 * np.where(terminateds, 0.0, next_values) - values
    np.testing.assert_allclose(advantages, td, rtol=1e-5, atol=1e-6)


def test_gamma_lambda_one_gives_return_to_go_minus_value():
    rng = np.random.default_rng(2)
    rewards = rng.normal(size=(6, 2))
    values = rng.normal(size=6)
    terminateds = np.array([0, 0, 0, 0, 0, 1], bool)
    next_values = np.append(values[1:], 123.0)  # last one ignored: terminated
    advantages, targets = team_gae(
        rewards, values, next_values, terminateds, np.zeros(6, bool), gamma=1.0, lambda_=1.0
    )
    return_to_go = np.cumsum(rewards.sum(1)[::-1])[::-1]
    np.testing.assert_allclose(advantages, return_to_go - values, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, return_to_go, rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_and_termination_does_not():
    rewards = np.array([[1.0, 1.0]])
    values = np.array([0.5])
    next_values = np.array([10.0])
    truncated, _ = team_gae(rewards, values, next_values, [False], [True], gamma=0.9, lambda_=0.95)
    terminated, _ = team_gae(rewards, values, next_values, [True], [False], gamma=0.9, lambda_=0.95)
    assert truncated[0] == pytest.approx(2.0 + 0.9 * 10.0 - 0.5)
    assert terminated[0] == pytest.approx(2.0 - 0.5)


def test_two_episodes_in_one_array_equal_each_alone():
    rng = np.random.default_rng(3)
    first = random_case(rng, horizon=7, n_ends=0)
    second = random_case(rng, horizon=5, n_ends=0)
    joined = [np.concatenate([a, b]) for a, b in zip(first, second, strict=True)]
    advantages, targets = team_gae(*joined, gamma=0.97, lambda_=0.9)
    alone_first = team_gae(*first, gamma=0.97, lambda_=0.9)
    alone_second = team_gae(*second, gamma=0.97, lambda_=0.9)
    np.testing.assert_allclose(advantages, np.concatenate([alone_first[0], alone_second[0]]))
    np.testing.assert_allclose(targets, np.concatenate([alone_first[1], alone_second[1]]))


def test_hand_computed_three_steps_two_agents():
    # gamma=0.5, lambda=0.5; one truncated segment of 3 steps.
    rewards = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])  # team: 1, 2, 2
    values = np.array([1.0, 2.0, 3.0])
    next_values = np.array([2.0, 3.0, 4.0])
    # deltas: 1 + 1 - 1 = 1; 2 + 1.5 - 2 = 1.5; 2 + 2 - 3 = 1
    # A2 = 1; A1 = 1.5 + 0.25 * 1 = 1.75; A0 = 1 + 0.25 * 1.75 = 1.4375
    advantages, targets = team_gae(
        rewards, values, next_values, [False] * 3, [False, False, True], gamma=0.5, lambda_=0.5
    )
    np.testing.assert_allclose(advantages, [1.4375, 1.75, 1.0])
    np.testing.assert_allclose(targets, [2.4375, 3.75, 4.0])


def test_permuting_agents_changes_nothing():
    rewards, *rest = random_case(np.random.default_rng(4))
    base = team_gae(rewards, *rest, gamma=0.99, lambda_=0.95)
    permuted = team_gae(rewards[:, [2, 0, 1]], *rest, gamma=0.99, lambda_=0.95)
    np.testing.assert_allclose(base[0], permuted[0], rtol=1e-6)


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"values has shape \(3,\), expected \(4,\)"):
        team_gae(
            np.zeros((4, 2)),
            np.zeros(3),
            np.zeros(4),
            np.zeros(4),
            np.zeros(4),
            gamma=0.9,
            lambda_=0.9,
        )


def test_standardize_valid_ignores_invalid_rows():
    from marllib_ext.ops import standardize_valid

    values = np.array([1.0, 3.0, 100.0, 5.0])
    valid = np.array([True, True, False, True])
    out = standardize_valid(values, valid)
    # mean 3, population std sqrt(8/3) over the valid rows only
    np.testing.assert_allclose(out[valid], (values[valid] - 3.0) / np.sqrt(8 / 3))
    assert out[valid].mean() == pytest.approx(0.0) and out[valid].std() == pytest.approx(1.0)
    np.testing.assert_allclose(standardize_valid([2.0, 2.0], [True, True]), [0.0, 0.0])
