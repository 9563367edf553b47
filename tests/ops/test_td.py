"""TD math shared by the replay learners against hand-computed cases and references."""

import numpy as np
import pytest
import torch

from marllib_ext.ops.td import (
    backward_linear_recurrence,
    common_rewards,
    episode_last_steps,
    masked_td_loss,
    merge_moments,
    moment_standardized_rewards,
    standardized_rewards,
    td_lambda_targets,
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


def slow_td_lambda(rewards, terminated, next_values, mask, gamma, lam):
    """The λ-return as the weighted sum of n-step returns, one episode row at a time:
    ``G_t = (1 - lam) sum_{n>=1} lam^(n-1) G_t^(n)`` with the tail weight on the
    longest n-step return (up to the last real step, which bootstraps fully)."""
    out = np.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        last = int(np.flatnonzero(mask[b])[-1]) if mask[b].any() else -1
        for t in range(last + 1):
            if not mask[b, t]:
                continue
            n_step = []  # G_t^(n), n = 1 .. last - t + 1
            total, discount = 0.0, 1.0
            for k in range(t, last + 1):
                total += discount * rewards[b, k]
                if terminated[b, k]:
                    n_step.append(total)  # every longer return equals it
                    break
                discount *= gamma
                n_step.append(total + discount * next_values[b, k])
            horizon = last - t + 1
            n_step += [n_step[-1]] * (horizon - len(n_step))
            weights = [(1 - lam) * lam**i for i in range(horizon - 1)] + [lam ** (horizon - 1)]
            out[b, t] = sum(w * g for w, g in zip(weights, n_step, strict=True))
    return out


def pymarl2_td_lambda(rewards, terminated, mask, target_qs, gamma, td_lambda):
    """pymarl2's ``build_td_lambda_targets`` (src/utils/rl_utils.py), for ``target_qs``
    ``(B, L + 1)`` with ``target_qs[:, t + 1]`` the bootstrap of step t."""
    ret = np.zeros_like(target_qs)
    ret[:, -1] = target_qs[:, -1] * (1 - terminated.sum(axis=1))
    for t in range(ret.shape[1] - 2, -1, -1):
        ret[:, t] = td_lambda * gamma * ret[:, t + 1] + mask[:, t] * (
            rewards[:, t] + (1 - td_lambda) * gamma * target_qs[:, t + 1] * (1 - terminated[:, t])
        )
    return ret[:, :-1]


def test_td_lambda_literal():
    # One truncated 3-step episode: G_2 = r_2 + g Q_3; G_1 = r_1 + g((1-l)Q_2 + l G_2).
    rewards = torch.tensor([[1.0, 2.0, 3.0]])
    next_values = torch.tensor([[10.0, 20.0, 30.0]])  # Q_1, Q_2, Q_3
    none = torch.zeros(1, 3)
    targets = td_lambda_targets(rewards, none, next_values, torch.ones(1, 3), 0.5, 0.5)
    g2 = 3.0 + 0.5 * 30.0
    g1 = 2.0 + 0.5 * (0.5 * 20.0 + 0.5 * g2)
    g0 = 1.0 + 0.5 * (0.5 * 10.0 + 0.5 * g1)
    torch.testing.assert_close(targets, torch.tensor([[g0, g1, g2]]))
    # Terminated at step 1, padding after it: no bootstrap past the end, 0 on padding.
    terminated = torch.tensor([[0.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    targets = td_lambda_targets(rewards, terminated, next_values, mask, 0.5, 0.5)
    torch.testing.assert_close(targets, torch.tensor([[1.0 + 0.5 * (5.0 + 1.0), 2.0, 0.0]]))


def test_td_lambda_limits_are_one_step_and_monte_carlo():
    generator = np.random.default_rng(3)
    rewards = torch.from_numpy(generator.normal(size=(4, 6))).float()
    next_values = torch.from_numpy(generator.normal(size=(4, 6))).float()
    terminated = torch.zeros(4, 6)
    terminated[0, 5] = 1.0
    mask = torch.ones(4, 6)
    torch.testing.assert_close(
        td_lambda_targets(rewards, terminated, next_values, mask, 0.9, 0.0),
        td_targets(rewards, terminated, next_values, 0.9),
    )
    # lambda 1, gamma 1 on a terminated episode: the undiscounted return to go.
    monte_carlo = td_lambda_targets(rewards, terminated, next_values, mask, 1.0, 1.0)
    torch.testing.assert_close(
        monte_carlo[0], torch.flip(torch.cumsum(torch.flip(rewards[0], [0]), 0), [0])
    )


@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
def test_td_lambda_against_the_n_step_returns(lam):
    """Terminations, truncations, padding, and per-agent rows with absent agents."""
    generator = np.random.default_rng(7)
    batch, length = 6, 8
    rewards = generator.normal(size=(batch, length))
    next_values = generator.normal(size=(batch, length))
    mask = np.ones((batch, length))
    terminated = np.zeros((batch, length))
    mask[1, 5:] = 0  # truncated after 5 steps (padding)
    mask[2, 3:] = 0
    terminated[2, 2] = 1  # terminated at step 2
    terminated[3, 7] = 1
    mask[4, 6:] = 0  # an agent absent from step 6 on (per-agent rows)
    got = td_lambda_targets(
        *(torch.from_numpy(a).float() for a in (rewards, terminated, next_values, mask)),
        gamma=0.9, lambda_=lam,
    )  # fmt: skip
    expected = slow_td_lambda(rewards, terminated, next_values, mask, 0.9, lam)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
    per_agent = td_lambda_targets(
        *(torch.from_numpy(np.stack([a, a[::-1]], -1).copy()).float()
          for a in (rewards, terminated, next_values, mask)),
        gamma=0.9, lambda_=lam,
    )  # fmt: skip
    np.testing.assert_allclose(per_agent[..., 0].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_backward_linear_recurrence_literal_and_against_a_step_loop():
    # x_2 = 3, x_1 = 2 + 0.5 * 3 = 3.5, x_0 = 1 + 0 * 3.5 = 1 (a factor 0 cuts the chain)
    got = backward_linear_recurrence(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.0, 0.5, 9.0]))
    torch.testing.assert_close(got, torch.tensor([1.0, 3.5, 3.0]))
    generator = torch.Generator().manual_seed(3)
    offset = torch.randn(4, 3, 70, generator=generator, dtype=torch.float64)
    factor = torch.rand(4, 3, 70, generator=generator, dtype=torch.float64)
    factor[0, 0, 40] = 0.0
    expected, following = torch.zeros_like(offset), torch.zeros_like(offset[..., 0])
    for t in range(69, -1, -1):
        following = offset[..., t] + factor[..., t] * following
        expected[..., t] = following
    for chunk in (1, 3, 32, 70, 500):  # one step, ragged blocks, one block, wider
        torch.testing.assert_close(backward_linear_recurrence(offset, factor, chunk), expected)
    with pytest.raises(ValueError, match="chunk"):
        backward_linear_recurrence(offset, factor, 0)


def test_td_lambda_over_episodes_longer_than_a_block():
    generator = np.random.default_rng(11)
    batch, length = 5, 75  # three blocks of the recurrence
    rewards, next_values = generator.normal(size=(2, batch, length))
    mask, terminated = np.ones((batch, length)), np.zeros((batch, length))
    mask[1, 40:] = 0
    mask[2, 43:] = 0  # blocks [0, 11), [11, 43), [43, 75)
    terminated[2, 42] = 1  # terminated at a block's last step
    terminated[3, 64] = 1
    mask[3, 65:] = 0
    got = td_lambda_targets(
        *(torch.from_numpy(a).float() for a in (rewards, terminated, next_values, mask)),
        gamma=0.99, lambda_=0.6,
    )  # fmt: skip
    expected = slow_td_lambda(rewards, terminated, next_values, mask, 0.99, 0.6)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_td_lambda_equals_pymarl2_where_its_targets_are_defined():
    """Full-length episodes (truncated at the last step) and terminated ones: pymarl2's
    recursion gives the same targets (it reads padding's Q after a truncation)."""
    generator = np.random.default_rng(11)
    rewards = generator.normal(size=(3, 5))
    target_qs = generator.normal(size=(3, 6))  # Q_0 .. Q_5
    terminated = np.zeros((3, 5))
    mask = np.ones((3, 5))
    terminated[1, 2], mask[1, 3:] = 1, 0
    terminated[2, 4] = 1
    ours = td_lambda_targets(
        *(torch.from_numpy(a).float() for a in (rewards, terminated, target_qs[:, 1:], mask)),
        gamma=0.99, lambda_=0.6,
    )  # fmt: skip
    theirs = pymarl2_td_lambda(rewards, terminated, mask, target_qs, 0.99, 0.6)
    np.testing.assert_allclose(ours.numpy(), theirs * mask, rtol=1e-5, atol=1e-5)


def test_td_lambda_rejects_lambda_outside_the_unit_interval():
    ones = torch.ones(1, 2)
    with pytest.raises(ValueError, match="lambda_"):
        td_lambda_targets(ones, ones * 0, ones, ones, 0.9, 1.5)


def test_episode_last_steps_literal_and_against_a_loop():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    expected = [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert episode_last_steps(mask).tolist() == expected
    lengths = torch.randint(0, 9, (20,))
    mask = (torch.arange(8)[None] < lengths[:, None]).float()
    slow = torch.zeros_like(mask)
    for row, length in enumerate(lengths.tolist()):
        if length:
            slow[row, min(length, 8) - 1] = 1.0
    assert torch.equal(episode_last_steps(mask), slow)


def test_common_rewards_literal_and_against_a_loop():
    rewards = torch.tensor([[1.0, 2.0, 4.0, 8.0], [0.0, 0.5, 0.0, -1.0]])  # (T=2, n=4)
    out = common_rewards(rewards, [[0, 2], [1]])  # agent 3 in no team keeps its own
    want = torch.tensor([[5.0, 2.0, 5.0, 8.0], [0.0, 0.5, 0.0, -1.0]])
    torch.testing.assert_close(out, want)
    rewards = torch.randn(3, 5, 4)
    teams = [[0, 3], [1, 2]]
    slow = rewards.clone()
    for b in range(3):
        for t in range(5):
            for team in teams:
                total = sum(float(rewards[b, t, j]) for j in team)
                for i in team:
                    slow[b, t, i] = total
    torch.testing.assert_close(common_rewards(rewards, teams), slow)


def test_n_step_returns_literal_and_against_a_loop():
    from marllib_ext.ops.td import n_step_returns

    rewards = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 0.0]])
    terminated = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    returns, discounts, steps = n_step_returns(rewards, terminated, mask, 0.5)
    assert returns.tolist() == [1.0 + 0.5 * 2.0 + 0.25 * 4.0, 1.0 + 0.5 * 2.0]
    assert discounts.tolist() == [0.125, 0.0] and steps.tolist() == [3, 2]

    torch.manual_seed(0)
    lengths = torch.randint(1, 6, (32,))
    mask = (torch.arange(5)[None] < lengths[:, None]).float()
    rewards = torch.randn(32, 5, 3) * mask[..., None]
    terminated = torch.zeros(32, 5)
    ended = torch.rand(32) < 0.5
    terminated[torch.arange(32), lengths - 1] = ended.float()
    returns, discounts, steps = n_step_returns(rewards, terminated, mask, 0.9)
    for b in range(32):
        m = int(lengths[b])
        expected = sum(0.9**k * rewards[b, k] for k in range(m))
        torch.testing.assert_close(returns[b], expected)
        assert discounts[b].item() == pytest.approx(0.9**m * (1 - float(ended[b])))
        assert steps[b].item() == m
