"""HAPPO's factor M and surrogate: hand computations and the one-agent PPO case."""

import numpy as np
import pytest
import torch

from marllib_ext.ops.happo import happo_factors, happo_surrogate, team_row_log_ratio


def test_three_agents_in_a_given_order_by_hand():
    # Ratios after each agent's update, in update order, at two env steps.
    ratios = np.array([[2.0, 0.5], [0.5, 1.5], [3.0, 0.1]])
    factors = happo_factors(np.log(ratios))
    expected = np.array(
        [
            [1.0, 1.0],  # the first agent: nobody before it
            [2.0, 0.5],  # the second: the first agent's ratio
            [2.0 * 0.5, 0.5 * 1.5],  # the third: the product of the first two
        ]
    )
    np.testing.assert_allclose(factors, expected)


def test_factors_match_a_slow_loop():
    rng = np.random.default_rng(0)
    log_ratios = rng.normal(scale=0.3, size=(5, 7))
    slow = np.ones_like(log_ratios)
    for m in range(5):
        for j in range(m):
            slow[m] *= np.exp(log_ratios[j])
    np.testing.assert_allclose(happo_factors(log_ratios), slow)


def test_a_group_policy_ratio_is_the_product_over_its_agents():
    # Rows of a group policy: two agents at env steps 0 and 2, one at step 1.
    log_ratio = np.log([2.0, 3.0, 0.5, 4.0, 0.25])
    team_rows = [0, 0, 1, 2, 2]
    np.testing.assert_allclose(
        np.exp(team_row_log_ratio(log_ratio, team_rows, 4)), [6.0, 0.5, 1.0, 1.0]
    )


def test_one_agent_is_exactly_ppo():
    ratio = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.6])
    advantages = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0])
    clip = 0.2
    ppo = torch.min(ratio * advantages, torch.clamp(ratio, 1 - clip, 1 + clip) * advantages)
    (factor,) = happo_factors(np.zeros((1, 5)))
    happo = happo_surrogate(ratio, advantages, torch.as_tensor(factor).float(), clip_param=clip)
    torch.testing.assert_close(happo, ppo)


def test_the_factor_scales_the_advantage():
    ratio = torch.tensor([0.7, 1.3])
    advantages = torch.tensor([1.0, 1.0])
    out = happo_surrogate(ratio, advantages, torch.tensor([2.0, 0.5]), clip_param=0.2)
    # min(0.7*2, 0.8*2) = 1.4 ; min(1.3*0.5, 1.2*0.5) = 0.6
    torch.testing.assert_close(out, torch.tensor([1.4, 0.6]))


def test_shape_errors():
    with pytest.raises(ValueError, match="n_agents, T"):
        happo_factors(np.zeros(3))
