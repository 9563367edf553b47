"""TD math shared by the replay learners against hand-computed cases and references."""

import pytest
import torch

from marllib_ext.ops.td import (
    masked_td_loss,
    merge_moments,
    moment_standardized_rewards,
    standardized_rewards,
    td_targets,
)


def test_td_targets_terminal_and_truncated_literal():
    rewards = torch.tensor([1.0, 1.0, 1.0])
    terminated = torch.tensor([0.0, 1.0, 0.0])  # step 2 terminal; step 3 a time-limit end
    next_values = torch.tensor([2.0, 2.0, 2.0])
    # terminal: no bootstrap; truncated (not terminal) still bootstraps from s'
    assert td_targets(rewards, terminated, next_values, 0.5).tolist() == [2.0, 1.0, 2.0]


def test_td_targets_carry_no_gradient():
    next_values = torch.ones(3, requires_grad=True)
    assert not td_targets(torch.zeros(3), torch.zeros(3), next_values, 0.9).requires_grad


def test_masked_td_loss_literal():
    values = torch.tensor([[1.0, 2.0, 0.0]])
    targets = torch.tensor([[0.0, 0.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third step is padding
    assert masked_td_loss(values, targets, mask).item() == pytest.approx((1 + 4) / 2)
    weights = torch.tensor([0.5])
    assert masked_td_loss(values, targets, mask, weights).item() == pytest.approx(2.5 / 2)


def test_masked_td_loss_per_agent_values_count_every_agent_step():
    values = torch.tensor([[[1.0, 3.0]]])  # (B=1, L=1, n=2)
    targets = torch.zeros(1, 1, 2)
    loss = masked_td_loss(values, targets, torch.ones(1, 1))
    assert loss.item() == pytest.approx((1 + 9) / 2)


def test_standardized_rewards_ignore_padding():
    rewards = torch.tensor([[1.0, 3.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = standardized_rewards(rewards, mask)
    assert out[0, :2].tolist() == pytest.approx([-1.0, 1.0], abs=1e-4)
    assert out[0, 2].item() == 0.0


def test_moment_standardized_rewards_literal():
    # running moments mean 1, var 4: (r - 1) / 2 on real steps, per agent too
    rewards = torch.tensor([[[1.0, 3.0], [5.0, -1.0], [99.0, 99.0]]])  # (B=1, L=3, n=2)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = moment_standardized_rewards(rewards, mask, torch.tensor(1.0), torch.tensor(4.0))
    want = torch.tensor([[0.0, 1.0], [2.0, -1.0], [0.0, 0.0]])
    torch.testing.assert_close(out[0], want, atol=1e-6, rtol=0)


def test_merge_moments_equals_the_moments_of_all_rows_at_once():
    torch.manual_seed(0)
    chunks = [torch.randn(n, 3) * 4.0 + 7.0 for n in (5, 1, 12, 0, 9)]
    mean, var, count = torch.zeros(3), torch.ones(3), 0.0
    for chunk in chunks:
        mean, var, count = merge_moments(mean, var, count, chunk)
    rows = torch.cat(chunks)
    assert count == len(rows)
    torch.testing.assert_close(mean, rows.mean(0))
    torch.testing.assert_close(var, rows.var(0, unbiased=False))


def test_merge_moments_literal():
    # rows {1, 3} then {5}: mean 3, population variance (4 + 0 + 4) / 3
    mean, var, count = merge_moments(
        torch.zeros(1), torch.ones(1), 0.0, torch.tensor([[1.0], [3.0]])
    )
    assert (mean.item(), var.item(), count) == (2.0, 1.0, 2.0)
    mean, var, count = merge_moments(mean, var, count, torch.tensor([[5.0]]))
    assert count == 3.0 and mean.item() == pytest.approx(3.0)
    assert var.item() == pytest.approx(8.0 / 3.0)
    with pytest.raises(ValueError, match="batch"):
        merge_moments(mean, var, count, torch.zeros(2, 2))
