"""ROER priorities and value losses against hand-computed values and analytic gradients."""

import math

import pytest
import torch

from marllib_ext.ops.roer import (
    ema_priority,
    gumbel_value_loss,
    js_priority,
    js_value_loss,
    kl_priority,
    per_priority,
)


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def test_kl_priority_literal_with_both_clips_and_mean_normalization():
    td = torch.tensor([0.0, 2.0, -20.0, 40.0])
    priority, weight = kl_priority(td, temp=2.0, min_clip=0.5, max_clip=10.0, normalize=False)
    # exp(0)=1, exp(1)=e, exp(-10) -> min_clip 0.5, exp(20) -> max_clip 10
    assert weight.tolist() == pytest.approx([1.0, math.e, 0.5, 10.0])
    assert torch.equal(priority, weight)
    normalized, _ = kl_priority(td, temp=2.0, min_clip=0.5, max_clip=10.0)
    mean = (1.0 + math.e + 0.5 + 10.0) / 4
    assert normalized.tolist() == pytest.approx([w / mean for w in [1.0, math.e, 0.5, 10.0]])
    assert normalized.mean().item() == pytest.approx(1.0)
    # No overflow for huge TD errors.
    huge, _ = kl_priority(torch.tensor([1e6, 0.0]), temp=1.0, min_clip=0.5, max_clip=50.0)
    assert torch.isfinite(huge).all()


def test_js_priority_literal_and_range():
    td = torch.tensor([0.0, 4.0, -1000.0, 1000.0])
    priority, sig = js_priority(td, temp=4.0, max_clip=50.0, js_min_weight=0.5, js_max_weight=2.0)
    expected_sig = [0.5, sigmoid(1.0), sigmoid(-50.0), sigmoid(50.0)]
    assert sig.tolist() == pytest.approx(expected_sig)
    assert priority.tolist() == pytest.approx([0.5 + s * 1.5 for s in expected_sig])
    generator = torch.Generator().manual_seed(0)
    wide = torch.randn(10_000, generator=generator) * 100
    p, _ = js_priority(wide, temp=1.0, max_clip=100.0, js_min_weight=0.5, js_max_weight=2.0)
    assert p.min().item() >= 0.5 and p.max().item() <= 2.0
    normalized, _ = js_priority(
        td, temp=4.0, max_clip=50.0, js_min_weight=0.5, js_max_weight=2.0, normalize=True
    )
    assert normalized.mean().item() == pytest.approx(1.0)


def test_gumbel_loss_literal_inside_and_beyond_the_clip():
    diff = torch.tensor([0.0, 2.0, 10.0])  # x = diff / 2 = 0, 1, 5; clip at 3
    loss, norm = gumbel_value_loss(diff, temp=2.0, gumbel_max_clip=3.0)
    raw = [0.0, math.e - 2.0, (math.exp(3) - 4.0) + 2.0 * (math.exp(3) - 1.0)]
    expected_norm = (1.0 + math.e + math.exp(3)) / 3
    assert norm.item() == pytest.approx(expected_norm)
    assert loss.tolist() == pytest.approx([r / expected_norm for r in raw])


def test_gumbel_gradient_is_analytic_and_continuous_at_the_clip():
    diff = torch.tensor([1.0, 5.9, 6.1, 9.0], requires_grad=True)
    temp, clip = 2.0, 3.0
    loss, norm = gumbel_value_loss(diff, temp=temp, gumbel_max_clip=clip)
    loss.sum().backward()
    x = [d / temp for d in (1.0, 5.9, 6.1, 9.0)]
    slope = [math.exp(min(v, clip)) - 1.0 for v in x]
    assert diff.grad.tolist() == pytest.approx([s / (temp * norm.item()) for s in slope])


def test_js_loss_literal_inside_and_beyond_the_clip():
    diff = torch.tensor([0.0, 4.0, 40.0, -40.0])  # x = 0, 1, 10, -10; clip 7
    loss, norm = js_value_loss(diff, temp=4.0, gumbel_max_clip=7.0)
    softplus = lambda v: math.log1p(math.exp(v))  # noqa: E731
    raw = [
        0.0,
        softplus(1.0) - math.log(2),
        softplus(7.0) - math.log(2) + 3.0 * sigmoid(7.0),
        softplus(-7.0) - math.log(2) - 3.0 * sigmoid(-7.0),
    ]
    expected_norm = (0.5 + sigmoid(1.0) + sigmoid(7.0) + 0.5) / 4
    assert norm.item() == pytest.approx(expected_norm)
    assert loss.tolist() == pytest.approx([r / expected_norm for r in raw])


def test_js_gradient_is_sigmoid_over_temp():
    diff = torch.tensor([-3.0, 0.0, 2.5, 100.0], requires_grad=True)
    temp = 2.0
    loss, norm = js_value_loss(diff, temp=temp, gumbel_max_clip=7.0)
    loss.sum().backward()
    # Inside the clip d/d diff = sigmoid(x)/temp; beyond it the tangent slope sigmoid(7)/temp.
    z = [max(-7.0, min(7.0, d / temp)) for d in (-3.0, 0.0, 2.5, 100.0)]
    expected = [sigmoid(v) / (temp * norm.item()) for v in z]
    assert diff.grad.tolist() == pytest.approx(expected)


def test_ema_and_per_priorities():
    old, new = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 0.0])
    assert ema_priority(old, new, 0.25).tolist() == pytest.approx([1.5, 1.5])
    assert torch.equal(ema_priority(old, new, 1.0), new)
    with pytest.raises(ValueError, match="per_beta"):
        ema_priority(old, new, 0.0)
    assert per_priority(torch.tensor([-2.0, 0.0]), eps=0.1).tolist() == pytest.approx([2.1, 0.1])


def test_bad_arguments_are_named():
    td = torch.zeros(2)
    with pytest.raises(ValueError, match="temp"):
        kl_priority(td, temp=0.0, min_clip=0.5, max_clip=2.0)
    with pytest.raises(ValueError, match="min_clip"):
        kl_priority(td, temp=1.0, min_clip=3.0, max_clip=2.0)
    with pytest.raises(ValueError, match="js_min_weight"):
        js_priority(td, temp=1.0, max_clip=5.0, js_min_weight=2.0, js_max_weight=1.0)
