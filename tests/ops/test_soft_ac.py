"""Soft actor-critic math against literals and slow references written from the papers
(SAC's appendix C, SAC-Discrete's expectation, SAC v2's temperature loss)."""

import math

import pytest
import torch

from marllib_ext.ops.soft_ac import (
    continuous_actor_loss,
    discrete_log_prob_mean,
    discrete_soft_objective,
    entropy_penalty,
    soft_td_target,
    squashed_gaussian_sample,
    team_actor_loss,
    temperature_loss,
)


def test_squashed_gaussian_literal_at_the_mean():
    """u = 0: the action is the box's middle and log pi = log N(0; 0, 1) - log h."""
    low, high = torch.tensor([0.0, -2.0]), torch.tensor([1.0, 2.0])
    zeros = torch.zeros(2)
    action, log_prob = squashed_gaussian_sample(zeros, zeros, low, high, zeros)
    assert action.tolist() == [0.5, 0.0]
    expected = 2 * (-0.5 * math.log(2 * math.pi)) - math.log(0.5) - math.log(2.0)
    assert log_prob.item() == pytest.approx(expected)


def test_squashed_gaussian_against_torch_distributions():
    """The same density as Normal -> tanh -> affine, torch's change of variables."""
    torch.manual_seed(0)
    mean, log_std = torch.randn(64, 3), torch.randn(64, 3) * 0.5
    low, high = torch.tensor([-1.0, 0.0, -3.0]), torch.tensor([1.0, 1.0, 5.0])
    noise = torch.randn(64, 3)
    action, log_prob = squashed_gaussian_sample(mean, log_std, low, high, noise)
    half = 0.5 * (high - low)
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()),
        [
            torch.distributions.TanhTransform(),
            torch.distributions.AffineTransform(loc=low + half, scale=half),
        ],
    )
    u = mean + log_std.exp() * noise
    expected_action = low + half + half * torch.tanh(u)
    torch.testing.assert_close(action, expected_action)
    # Away from the saturated tails, where both are exact.
    inside = (torch.tanh(u).abs() < 0.999).all(-1)
    torch.testing.assert_close(
        log_prob[inside], reference.log_prob(expected_action).sum(-1)[inside], atol=1e-4, rtol=1e-4
    )


def test_squashed_gaussian_stays_finite_in_the_saturated_tail():
    mean = torch.tensor([[30.0]])
    action, log_prob = squashed_gaussian_sample(
        mean, torch.zeros(1, 1), torch.tensor([-1.0]), torch.tensor([1.0]), torch.zeros(1, 1)
    )
    assert action.item() == pytest.approx(1.0) and torch.isfinite(log_prob).all()


def test_the_action_is_reparameterized():
    mean = torch.zeros(4, 2, requires_grad=True)
    log_std = torch.zeros(4, 2, requires_grad=True)
    bounds = torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 1.0])
    action, _ = squashed_gaussian_sample(mean, log_std, *bounds, torch.ones(4, 2))
    action.sum().backward()
    assert mean.grad.abs().min() > 0 and log_std.grad.abs().min() > 0


def test_soft_td_target_literals():
    rewards, done = torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0])
    q, twin = torch.tensor([2.0, 2.0]), torch.tensor([3.0, 1.0])
    penalty = torch.tensor([0.5, 0.5])
    targets = soft_td_target(rewards, 0.9 * (1 - done), q, twin, penalty)
    assert targets.tolist() == pytest.approx([1.0 + 0.9 * (2.0 - 0.5), 1.0])


def test_soft_td_target_against_a_loop_and_holds_no_gradient():
    torch.manual_seed(1)
    r, d = torch.randn(16), (torch.rand(16) < 0.3).float()
    q, twin = torch.randn(16, requires_grad=True), torch.randn(16)
    log_probs, present = torch.randn(16, 3), (torch.rand(16, 3) < 0.8).float()
    alphas = torch.tensor([0.1, 0.2, 0.3])
    penalty = entropy_penalty(log_probs, alphas, present)
    targets = soft_td_target(r, 0.99 * (1 - d), q, twin, penalty)
    assert not targets.requires_grad
    for b in range(16):
        soft = min(q[b].item(), twin[b].item()) - sum(
            alphas[i].item() * log_probs[b, i].item() * present[b, i].item() for i in range(3)
        )
        assert targets[b].item() == pytest.approx(r[b].item() + 0.99 * (1 - d[b].item()) * soft)


def test_discrete_expectation_literal_and_loop():
    probs = torch.tensor([[0.5, 0.5, 0.0]])
    log_probs = torch.log(probs.clamp(min=1e-30))
    q = torch.tensor([[1.0, 3.0, 100.0]])  # the illegal third action adds nothing
    loss = discrete_soft_objective(probs, log_probs, q, torch.tensor(1.0))
    assert loss.item() == pytest.approx(math.log(0.5) - 2.0)
    assert discrete_log_prob_mean(probs, log_probs).item() == pytest.approx(math.log(0.5))

    torch.manual_seed(2)
    logits, q = torch.randn(8, 5), torch.randn(8, 5)
    log_probs = torch.log_softmax(logits, -1)
    probs = log_probs.exp()
    loss = discrete_soft_objective(probs, log_probs, q, torch.tensor(0.3))
    for b in range(8):
        expected = sum(
            probs[b, a].item() * (0.3 * log_probs[b, a].item() - q[b, a].item()) for a in range(5)
        )
        assert loss[b].item() == pytest.approx(expected, rel=1e-5)


def test_continuous_actor_loss_over_the_mask():
    log_probs, q = torch.tensor([1.0, 2.0, 9.0]), torch.tensor([3.0, 1.0, 9.0])
    loss = continuous_actor_loss(log_probs, q, torch.tensor(0.5), torch.tensor([1.0, 1.0, 0.0]))
    assert loss.item() == pytest.approx(((0.5 - 3.0) + (1.0 - 1.0)) / 2)


def test_temperature_loss_lowers_alpha_above_the_target_entropy_and_raises_it_below():
    log_alpha = torch.tensor(0.0, requires_grad=True)
    mask = torch.ones(4)
    # Entropy 2 (log pi = -2) above the target 1: descent lowers log alpha.
    loss = temperature_loss(log_alpha, torch.full((4,), -2.0), 1.0, mask)
    assert loss.item() == pytest.approx(0.0)  # log alpha = 0
    (grad,) = torch.autograd.grad(loss, log_alpha)
    assert grad.item() == pytest.approx(1.0)  # -(log pi + H) = 1 > 0
    # Entropy 0.5 below the target 1: descent raises it.
    loss = temperature_loss(log_alpha, torch.full((4,), -0.5), 1.0, mask)
    (grad,) = torch.autograd.grad(loss, log_alpha)
    assert grad.item() == pytest.approx(-0.5)


def test_the_temperature_loss_sends_no_gradient_into_the_policy():
    log_probs = torch.randn(6, requires_grad=True)
    loss = temperature_loss(torch.tensor(0.3, requires_grad=True), log_probs, -2.0, torch.ones(6))
    loss.backward()
    assert log_probs.grad is None


def test_team_actor_loss_literal_and_against_a_loop():
    q, mask = torch.tensor([2.0, 4.0, 100.0]), torch.tensor([1.0, 1.0, 0.0])
    log_probs = torch.tensor([[1.0, -1.0], [3.0, -3.0], [50.0, 50.0]])
    acted = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    loss = team_actor_loss(q, mask, log_probs, torch.tensor([0.5, 2.0]), acted)
    assert loss.item() == pytest.approx(-3.0 + 0.5 * 2.0 + 2.0 * -1.0)

    torch.manual_seed(4)
    q, log_probs = torch.randn(16), torch.randn(16, 3)
    mask, acted = (torch.rand(16) < 0.8).float(), (torch.rand(16, 3) < 0.7).float()
    alphas = torch.tensor([0.1, 0.2, 0.3])
    expected = -sum(q[b] * mask[b] for b in range(16)) / mask.sum()
    for i in range(3):
        rows = [b for b in range(16) if acted[b, i] > 0]
        expected += sum(alphas[i] * log_probs[b, i] for b in rows) / max(1, len(rows))
    assert team_actor_loss(q, mask, log_probs, alphas, acted).item() == pytest.approx(
        float(expected), rel=1e-5
    )
