"""Lagrange multipliers and the safe-policy losses against hand-computed values."""

import pytest
import torch

from marllib_ext.ops.lagrange import (
    Lagrange,
    PIDLagrangian,
    cup_coefficient,
    cup_projection_loss,
    focops_loss,
    lagrangian_advantage,
)

# SafePO's CPPO-PID gains (configs/algos/_pid.yaml).
PID = {
    "kp": 0.1,
    "ki": 0.01,
    "kd": 0.01,
    "d_delay": 10,
    "delta_p_ema_alpha": 0.95,
    "delta_d_ema_alpha": 0.95,
    "sum_norm": True,
    "diff_norm": False,
    "penalty_max": 100.0,
    "init": 0.001,
}


def make_pid(**overrides):
    return PIDLagrangian(**{**PID, **overrides})


def test_cost_above_limit_raises_lambda_by_one_adam_step():
    lagrange = Lagrange(cost_limit=25.0, init=0.001, lr=0.035, upper_bound=None)
    # Adam's first step moves by lr in the direction of -grad = (J_c - d) > 0.
    assert lagrange.update(50.0) == pytest.approx(0.036, abs=1e-6)
    assert lagrange.update(30.0) > 0.036


def test_cost_below_limit_lowers_lambda_and_never_below_zero():
    lagrange = Lagrange(cost_limit=25.0, init=0.1, lr=0.035, upper_bound=None)
    previous = lagrange.multiplier
    values = []
    for _ in range(20):
        values.append(lagrange.update(0.0))
    assert values[0] < previous
    assert all(b <= a for a, b in zip(values, values[1:], strict=False))
    assert min(values) == 0.0  # clamped at 0, not negative
    assert lagrange.loss(0.0).item() == pytest.approx(0.0)


def test_upper_bound_clamps_lambda():
    lagrange = Lagrange(cost_limit=0.0, init=0.9, lr=0.5, upper_bound=1.0)
    for _ in range(5):
        assert lagrange.update(100.0) <= 1.0
    assert lagrange.multiplier == pytest.approx(1.0)


def test_lagrange_state_round_trip_continues_identically():
    a = Lagrange(cost_limit=1.0, init=0.2, lr=0.05, upper_bound=None)
    for cost in (3.0, 0.5, 2.0):
        a.update(cost)
    b = Lagrange(cost_limit=1.0, init=0.0, lr=0.05, upper_bound=None)
    b.set_state(a.get_state())
    assert b.multiplier == a.multiplier
    assert b.update(4.0) == pytest.approx(a.update(4.0))


def test_pid_matches_hand_computed_sequence():
    pid = PIDLagrangian(
        cost_limit=10.0,
        kp=0.1,
        ki=0.01,
        kd=0.01,
        d_delay=2,
        delta_p_ema_alpha=0.5,
        delta_d_ema_alpha=0.5,
        sum_norm=False,
        diff_norm=False,
        penalty_max=100.0,
        init=0.0,
    )
    # cost 20: I=0.1, P=5, D_cost=10, D=10-0    -> 0.5 + 0.1 + 0.1
    assert pid.update(20.0) == pytest.approx(0.7)
    # cost 5:  I=0.05, P=0, D_cost=7.5, D=7.5-0 -> 0 + 0.05 + 0.075
    assert pid.update(5.0) == pytest.approx(0.125)
    # cost 30: I=0.25, P=10, D_cost=18.75, D=18.75-10 (two updates ago) -> 1 + 0.25 + 0.0875
    assert pid.update(30.0) == pytest.approx(1.3375)


def test_pid_is_never_negative_and_respects_penalty_max_and_diff_norm():
    pid = make_pid(cost_limit=10.0, init=0.0, sum_norm=False, diff_norm=False)
    assert all(pid.update(0.0) == 0.0 for _ in range(5))
    capped = make_pid(cost_limit=0.0, kp=10.0, sum_norm=False, penalty_max=2.0)
    assert capped.update(1000.0) == 2.0
    normed = make_pid(cost_limit=0.0, kp=10.0, sum_norm=False, diff_norm=True)
    assert normed.update(1000.0) == 1.0


def test_pid_state_round_trip():
    a = make_pid(cost_limit=5.0, d_delay=3)
    for cost in (8.0, 2.0, 9.0, 7.0):
        a.update(cost)
    b = make_pid(cost_limit=5.0, d_delay=3)
    b.set_state(a.get_state())
    assert b.update(6.0) == pytest.approx(a.update(6.0))


def test_lagrangian_advantage_literal_and_reference():
    reward = torch.tensor([1.0, -1.0, 0.5])
    cost = torch.tensor([2.0, 0.0, -1.0])
    assert lagrangian_advantage(reward, cost, 1.0).tolist() == pytest.approx([-0.5, -0.5, 0.75])
    assert torch.equal(lagrangian_advantage(reward, cost, 0.0), reward)
    for lam in (0.3, 4.0):
        expected = [
            (r - lam * c) / (1 + lam) for r, c in zip(reward.tolist(), cost.tolist(), strict=True)
        ]
        assert lagrangian_advantage(reward, cost, lam).tolist() == pytest.approx(expected)
    with pytest.raises(ValueError, match="shapes"):
        lagrangian_advantage(reward, cost[:2], 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        lagrangian_advantage(reward, cost, -0.1)


def test_cup_coefficient_value():
    assert cup_coefficient(0.99, 0.95) == pytest.approx(5.95)
    assert cup_coefficient(0.9, 1.0) == pytest.approx(1.0)
    assert cup_coefficient(0.0, 0.5) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="gamma"):
        cup_coefficient(1.0, 0.95)


def test_cup_projection_loss_literal():
    ratio = torch.tensor([1.0, 2.0])
    cost_adv = torch.tensor([0.5, -1.0])
    kl = torch.tensor([0.01, 0.02])
    loss = cup_projection_loss(ratio, cost_adv, kl, multiplier=0.5, coefficient=5.95)
    assert loss.tolist() == pytest.approx([0.5 * 5.95 * 0.5 + 0.01, 0.5 * 5.95 * 2 * -1 + 0.02])


def test_focops_mask_zeroes_loss_and_gradient_where_kl_exceeds_eta():
    ratio = torch.tensor([1.0, 2.0, 1.0], requires_grad=True)
    advantages = torch.tensor([1.5, 3.0, -0.3])
    kl = torch.tensor([0.01, 0.05, 0.02], requires_grad=True)
    loss = focops_loss(ratio, advantages, kl, focops_lam=1.5, focops_eta=0.02)
    # inside: 0.01 - 1*1.5/1.5; outside (0.05 > 0.02): 0; on the boundary: kept.
    assert loss.tolist() == pytest.approx([-0.99, 0.0, 0.02 + 0.3 / 1.5])
    loss.sum().backward()
    assert ratio.grad.tolist() == pytest.approx([-1.0, 0.0, 0.2])
    assert kl.grad.tolist() == pytest.approx([1.0, 0.0, 1.0])
