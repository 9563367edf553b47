"""Joint double-Q math against slow references and hand-computed cases."""

import itertools

import pytest
import torch

from marllib_ext.ops.joint_q import (
    action_gaps,
    chosen_action_values,
    double_q_next_values,
    epsilon_greedy,
    linear_schedule,
)
from marllib_ext.ops.mixers import vdn_mix
from marllib_ext.ops.td import (
    td_targets,
    team_sum,
)


def test_chosen_action_values_literal():
    q = torch.tensor([[[1.0, 5.0, 2.0], [0.5, -1.0, 3.0]]])  # (1, 2 agents, 3 actions)
    actions = torch.tensor([[1, 2]])
    assert chosen_action_values(q, actions).tolist() == [[5.0, 3.0]]


def test_chosen_action_values_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="actions"):
        chosen_action_values(torch.zeros(2, 3, 4), torch.zeros(2, 2, dtype=torch.long))


def test_double_q_uses_online_argmax_and_target_value():
    online = torch.tensor([[0.0, 2.0, 1.0]])
    target = torch.tensor([[10.0, -3.0, 7.0]])
    # online picks action 1; the target scores it -3 (plain max over target would be 10)
    assert double_q_next_values(online, target).tolist() == [-3.0]


def test_double_q_matches_slow_loop():
    torch.manual_seed(0)
    online, target = torch.randn(4, 5, 3, 6), torch.randn(4, 5, 3, 6)
    fast = double_q_next_values(online, target)
    for b, t, i in itertools.product(range(4), range(5), range(3)):
        best = max(range(6), key=lambda a: online[b, t, i, a].item())
        assert fast[b, t, i].item() == pytest.approx(target[b, t, i, best].item())


def test_linear_schedule_literal():
    assert linear_schedule(0, 1.0, 0.05, 50_000) == 1.0
    assert linear_schedule(25_000, 1.0, 0.05, 50_000) == pytest.approx(0.525)
    assert linear_schedule(10**9, 1.0, 0.05, 50_000) == pytest.approx(0.05)
    assert linear_schedule(5, 1.0, 0.05, 0) == pytest.approx(0.05)


def test_epsilon_greedy_takes_random_action_only_below_epsilon():
    q = torch.tensor([[0.0, 1.0], [5.0, 1.0]])
    draws = torch.tensor([0.05, 0.5])
    random_actions = torch.tensor([0, 1])
    assert epsilon_greedy(q, 0.1, draws, random_actions).tolist() == [0, 0]
    assert epsilon_greedy(q, 0.0, draws, random_actions).tolist() == [1, 0]


def slow_joint_target(episode, q_online, q_target, gamma, team):
    """y_t for one episode, written out step by step: r_team + gamma * (1 - term) *
    sum_{i in team} Q_target_i(o_{t+1}, argmax_a Q_online_i(o_{t+1}, a))."""
    targets = []
    for t in range(len(episode["rewards"])):
        bootstrap = 0.0
        for i in team:
            row = q_online[t + 1][i]
            best = row.index(max(row))
            bootstrap += q_target[t + 1][i][best]
        r_team = sum(episode["rewards"][t][i] for i in team)
        targets.append(r_team + gamma * (1 - episode["terminated"][t]) * bootstrap)
    return targets


@pytest.mark.parametrize("terminal_end", [True, False])
def test_vdn_joint_target_matches_slow_reference_per_team(terminal_end):
    """Two teams of a 4-agent episode of 3 steps, ending terminally or by time limit."""
    torch.manual_seed(1)
    steps, agents, actions = 3, 4, 3
    q_online = torch.randn(steps + 1, agents, actions)
    q_target = torch.randn(steps + 1, agents, actions)
    rewards = torch.randn(steps, agents)
    terminated = torch.tensor([0.0, 0.0, 1.0 if terminal_end else 0.0])
    episode = {"rewards": rewards.tolist(), "terminated": terminated.tolist()}
    next_values = double_q_next_values(q_online[1:], q_target[1:])  # (steps, agents)
    for team in ([0, 1], [2, 3]):
        fast = td_targets(team_sum(rewards, team), terminated, vdn_mix(next_values[:, team]), 0.9)
        slow = slow_joint_target(episode, q_online.tolist(), q_target.tolist(), 0.9, team)
        assert fast.tolist() == pytest.approx(slow, abs=1e-5)
    if terminal_end:  # the terminal step's target is the team reward alone
        assert fast[-1].item() == pytest.approx(rewards[-1, [2, 3]].sum().item(), abs=1e-6)


def test_iql_targets_are_each_agents_own():
    torch.manual_seed(2)
    q_online, q_target = torch.randn(3, 2, 4), torch.randn(3, 2, 4)
    rewards, terminated = torch.randn(2, 2), torch.tensor([0.0, 1.0])
    targets = td_targets(
        rewards, terminated.unsqueeze(-1), double_q_next_values(q_online[1:], q_target[1:]), 0.99
    )
    for i in range(2):
        slow = slow_joint_target(
            {"rewards": rewards.tolist(), "terminated": terminated.tolist()},
            q_online.tolist(),
            q_target.tolist(),
            0.99,
            [i],
        )
        assert targets[:, i].tolist() == pytest.approx(slow, abs=1e-5)


def test_action_gaps_literal_with_masks():
    q = torch.tensor([[3.0, 1.0, 2.5], [0.0, 5.0, -1.0], [2.0, 2.0, 0.0], [4.0, 9.0, 1.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 1], [1, 1, 0], [0, 1, 0]])
    gaps = action_gaps(q, mask)
    torch.testing.assert_close(gaps[:3], torch.tensor([0.5, 1.0, 0.0]))
    assert torch.isnan(gaps[3])  # one legal action: no choice to flip
    torch.testing.assert_close(action_gaps(q)[:2], torch.tensor([0.5, 5.0]))


def test_action_gaps_match_slow_loop():
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(4, 5, 3, 6, generator=generator)
    mask = (torch.rand(4, 5, 3, 6, generator=generator) > 0.4).float()
    gaps = action_gaps(q, mask)
    for index in itertools.product(range(4), range(5), range(3)):
        legal = sorted((float(q[index][a]) for a in range(6) if mask[index][a] > 0), reverse=True)
        if len(legal) < 2:
            assert torch.isnan(gaps[index])
        else:
            assert float(gaps[index]) == pytest.approx(legal[0] - legal[1], abs=1e-6)


def test_action_gaps_refuse_a_mask_of_another_shape():
    with pytest.raises(ValueError, match="mask has shape"):
        action_gaps(torch.zeros(2, 3), torch.ones(2, 4))
