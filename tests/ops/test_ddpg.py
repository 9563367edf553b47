"""Deterministic actor-critic math: bounds, exploration noise, MADDPG's own-action input."""

import pytest
import torch

from marllib_ext.ops.ddpg import (
    deterministic_policy_loss,
    gaussian_exploration,
    joint_actions_with_own,
    smoothed_target_actions,
    squash_to_bounds,
)


def test_squash_to_bounds_literal():
    low, high = torch.tensor([0.0, -2.0]), torch.tensor([1.0, 2.0])
    out = squash_to_bounds(torch.tensor([[0.0, 0.0], [100.0, -100.0]]), low, high)
    torch.testing.assert_close(out, torch.tensor([[0.5, 0.0], [1.0, -2.0]]))


def test_gaussian_exploration_scales_by_half_range_and_clips():
    low, high = torch.tensor([0.0]), torch.tensor([2.0])
    actions = torch.tensor([[1.0], [1.9]])
    noise = torch.tensor([[1.0], [1.0]])
    # noise 0.1 * (2 - 0) / 2 * 1 = 0.1; the second action is clipped at 2
    out = gaussian_exploration(actions, 0.1, low, high, noise)
    torch.testing.assert_close(out, torch.tensor([[1.1], [2.0]]))


def test_maddpg_input_takes_only_the_own_action_from_the_policy():
    batch_actions = torch.tensor([[[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]])
    policy_actions = torch.tensor([[[9.0, 9.0], [8.0, 8.0], [7.0, 7.0]]], requires_grad=True)
    joint = joint_actions_with_own(batch_actions, policy_actions, agent=1)
    assert joint.tolist() == [[[1.0, 1.0], [8.0, 8.0], [3.0, 3.0]]]
    joint.sum().backward()
    grad = policy_actions.grad[0]
    assert grad[1].tolist() == [1.0, 1.0]
    assert grad[0].abs().sum() == 0 and grad[2].abs().sum() == 0


def test_maddpg_input_carries_no_gradient_into_batch_actions():
    batch_actions = torch.ones(2, 2, 1, requires_grad=True)
    policy_actions = torch.zeros(2, 2, 1, requires_grad=True)
    joint_actions_with_own(batch_actions, policy_actions, agent=0).sum().backward()
    assert batch_actions.grad is None


def test_deterministic_policy_loss_is_minus_the_mean_over_real_steps():
    values = torch.tensor([1.0, 3.0, 100.0])
    mask = torch.tensor([1.0, 1.0, 0.0])
    assert deterministic_policy_loss(values, mask).item() == pytest.approx(-2.0)
    per_agent = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert deterministic_policy_loss(per_agent, torch.ones(2)).item() == pytest.approx(-2.5)


def test_smoothed_target_actions_literal():
    """Box [0, 2] (half range 1), noise 0.2, clip 0.5: eps 1 adds 0.2, eps 10 adds the clip
    0.5, eps -10 subtracts it, and the box bounds the result."""
    low, high = torch.tensor([0.0]), torch.tensor([2.0])
    actions = torch.tensor([[1.0], [1.0], [1.0], [1.8]])
    eps = torch.tensor([[1.0], [10.0], [-10.0], [1.5]])
    out = smoothed_target_actions(actions, 0.2, 0.5, low, high, eps)
    torch.testing.assert_close(out, torch.tensor([[1.2], [1.5], [0.5], [2.0]]))


def test_smoothed_target_actions_against_a_per_element_reference():
    generator = torch.Generator().manual_seed(0)
    low, high = torch.tensor([-1.0, 0.0, -3.0]), torch.tensor([1.0, 1.0, 5.0])
    actions = low + (high - low) * torch.rand(6, 4, 3, generator=generator)
    eps = torch.randn(6, 4, 3, generator=generator) * 3
    out = smoothed_target_actions(actions, 0.3, 0.4, low, high, eps)
    for index in torch.cartesian_prod(torch.arange(6), torch.arange(4), torch.arange(3)):
        b, n, a = index.tolist()
        half = (high[a] - low[a]).item() / 2
        noise = min(max(0.3 * eps[b, n, a].item(), -0.4), 0.4)
        expected = min(max(actions[b, n, a].item() + half * noise, low[a].item()), high[a].item())
        assert out[b, n, a].item() == pytest.approx(expected, abs=1e-6)
