"""COMA's counterfactual baseline against brute-force enumeration, and its critic inputs."""

import itertools

import numpy as np
import pytest

from marllib_ext.ops.coma import (
    counterfactual_advantage,
    critic_inputs,
    policy_from_logits,
    team_q_fill,
)


def brute_force_advantage(joint_q, policy, actions):
    """joint_q[t][a_0, ..., a_{n-1}]: a random Q table over joint actions. For agent i,
    enumerate its actions with the others' fixed."""
    steps, n_agents = actions.shape
    advantages = np.zeros((steps, n_agents))
    for t in range(steps):
        taken = tuple(actions[t])
        for i in range(n_agents):
            baseline = 0.0
            for alternative in range(joint_q.shape[-1]):
                joint = list(taken)
                joint[i] = alternative
                baseline += policy[t, i, alternative] * joint_q[t][tuple(joint)]
            advantages[t, i] = joint_q[t][taken] - baseline
    return advantages


def test_matches_brute_force_enumeration_on_random_q_tables():
    rng = np.random.default_rng(0)
    steps, n_agents, n_actions = 4, 3, 5
    joint_q = rng.normal(size=(steps, *([n_actions] * n_agents)))
    policy = rng.dirichlet(np.ones(n_actions), size=(steps, n_agents))
    actions = rng.integers(n_actions, size=(steps, n_agents))
    # The critic's per-agent view of the table: q[t, i, a'] = Q(s, (a_{-i}, a')).
    q_values = np.zeros((steps, n_agents, n_actions))
    for t, i, alternative in itertools.product(range(steps), range(n_agents), range(n_actions)):
        joint = list(actions[t])
        joint[i] = alternative
        q_values[t, i, alternative] = joint_q[t][tuple(joint)]
    advantages, q_taken = counterfactual_advantage(q_values, policy, actions)
    np.testing.assert_allclose(advantages, brute_force_advantage(joint_q, policy, actions))
    np.testing.assert_allclose(
        q_taken, np.stack([[joint_q[t][tuple(actions[t])]] * 3 for t in range(steps)])
    )


def test_hand_computed_case():
    q_values = np.array([[[1.0, 3.0]]])  # one step, one agent, two actions
    policy = np.array([[[0.25, 0.75]]])
    advantages, _ = counterfactual_advantage(q_values, policy, np.array([[0]]))
    assert advantages[0, 0] == pytest.approx(1.0 - (0.25 * 1.0 + 0.75 * 3.0))


def test_critic_inputs_hide_the_agents_own_action():
    states = np.array([[7.0, 8.0]])
    inputs = critic_inputs(states, np.array([[1, 0]]), n_actions=2)
    np.testing.assert_array_equal(
        inputs[0],
        [
            [7, 8, 0, 0, 1, 0, 1, 0],  # agent 0: its slot zeroed, agent 1 took 0, id 0
            [7, 8, 0, 1, 0, 0, 0, 1],  # agent 1: agent 0 took 1, its slot zeroed, id 1
        ],
    )


def test_shape_errors():
    with pytest.raises(ValueError, match="n_agents"):
        counterfactual_advantage(np.zeros((2, 3, 4)), np.zeros((2, 3, 4)), np.zeros((2, 2)))


def test_policy_from_logits_by_hand_and_padded_actions():
    logits = np.array([[0.0, np.log(3.0), -np.inf]])
    np.testing.assert_allclose(policy_from_logits(logits), [[0.25, 0.75, 0.0]])


def test_absent_agents_have_no_action_in_the_critic_inputs():
    states = np.array([[0.5], [0.25]], np.float32)
    actions = np.array([[1, 0], [0, 1]])
    present = np.array([[True, False], [True, True]])
    inputs = critic_inputs(states, actions, 2, present)
    # Row 0: agent 1 is absent, so agent 0 sees no action of it; agent 1 sees agent 0's.
    np.testing.assert_array_equal(inputs[0, 0], [0.5, 0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(inputs[0, 1], [0.5, 0, 1, 0, 0, 0, 1])
    np.testing.assert_array_equal(inputs[1, 0], [0.25, 0, 0, 0, 1, 1, 0])


def test_absent_agents_bootstrap_on_their_teammates_q():
    q_taken = np.array([[1.0, 3.0, 8.0], [2.0, 9.0, 4.0], [5.0, 6.0, 7.0]])
    present = np.array([[True, True, False], [False, False, True], [False, False, False]])
    filled = team_q_fill(q_taken, present)
    np.testing.assert_allclose(filled, [[1.0, 3.0, 2.0], [4.0, 4.0, 4.0], [0.0, 0.0, 0.0]])
