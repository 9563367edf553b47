"""A2C's policy loss: hand-computed values and PPO's gradient at ratio 1."""

import math

import pytest
import torch

from marllib_ext.ops.a2c import a2c_policy_loss


def test_hand_computed_case():
    logp = torch.tensor([math.log(0.5), math.log(0.25)])
    advantages = torch.tensor([2.0, -1.0])
    entropy = torch.tensor([0.7, 1.0])
    loss = a2c_policy_loss(logp, advantages, entropy, entropy_coeff=0.1)
    # -log(0.5)*2 - 0.1*0.7 = 1.38629 - 0.07 ; -log(0.25)*(-1) - 0.1*1.0 = -1.38629 - 0.1
    expected = torch.tensor([1.3862944 - 0.07, -1.3862944 - 0.1])
    torch.testing.assert_close(loss, expected)


def test_no_gradient_flows_into_the_advantage():
    logp = torch.tensor([-0.3, -1.2], requires_grad=True)
    advantages = torch.tensor([1.5, -0.5], requires_grad=True)
    a2c_policy_loss(logp, advantages, torch.zeros(2), entropy_coeff=0.0).sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([-1.5, 0.5]))
    assert advantages.grad is None


def test_same_gradient_as_ppo_surrogate_at_ratio_one():
    logits = torch.randn(5, 3, requires_grad=True)
    actions = torch.tensor([0, 2, 1, 1, 0])
    advantages = torch.randn(5)
    dist = torch.distributions.Categorical(logits=logits)
    logp = dist.log_prob(actions)
    a2c = a2c_policy_loss(logp, advantages, torch.zeros(5), entropy_coeff=0.0).mean()
    (a2c_grad,) = torch.autograd.grad(a2c, logits, retain_graph=True)
    ratio = torch.exp(logp - logp.detach())
    clip = 0.2
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    (ppo_grad,) = torch.autograd.grad(-surrogate.mean(), logits)
    torch.testing.assert_close(a2c_grad, ppo_grad)


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="same shape"):
        a2c_policy_loss(torch.zeros(3), torch.zeros(2), torch.zeros(3), entropy_coeff=0.0)
