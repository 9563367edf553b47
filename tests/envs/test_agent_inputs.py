"""The agent's id and last action in its observation (``envs.agent_inputs``), as the
joint-Q settings ``obs_agent_id`` / ``obs_last_action`` ask for them."""

import numpy as np
import pytest

from marllib_ext import make_env
from marllib_ext.envs.agent_inputs import AGENT_ID_ARG, LAST_ACTION_ARG, agent_input_features
from marllib_ext.errors import ConfigError


def test_features_literal():
    np.testing.assert_array_equal(agent_input_features(1, 3, 2, 4), [0, 1, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(agent_input_features(0, 2, None, 3), [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(agent_input_features(2, 0, 1, 2), [0, 1])


def test_observations_carry_the_id_and_the_last_action():
    plain = make_env("toy:coordination").make_rllib_env()
    wide = make_env(
        "toy:coordination", **{AGENT_ID_ARG: True, LAST_ACTION_ARG: True}
    ).make_rllib_env()
    agents = sorted(plain.par_env.possible_agents)
    n_actions = int(plain.action_space[agents[0]].n)
    first, _ = plain.reset(seed=3)
    observations, _ = wide.reset(seed=3)
    for i, agent in enumerate(agents):
        width = len(first[agent])
        np.testing.assert_array_equal(observations[agent][:width], first[agent])
        expected = agent_input_features(i, len(agents), None, n_actions)
        np.testing.assert_array_equal(observations[agent][width:], expected)
        assert wide.observation_space[agent].contains(observations[agent])
    actions = {agent: i % n_actions for i, agent in enumerate(agents)}
    after, *_ = wide.step(actions)
    for agent in agents:
        tail = after[agent][-n_actions:]
        np.testing.assert_array_equal(tail, np.eye(n_actions)[actions[agent]])
    again, _ = wide.reset(seed=4)
    assert not again[agents[0]][-n_actions:].any()  # no last action after a reset


def test_masked_observations_keep_their_mask():
    wide = make_env("toy:legal_moves", **{AGENT_ID_ARG: True}).make_rllib_env()
    observations, _ = wide.reset(seed=0)
    for agent, obs in observations.items():
        assert set(obs) == {"observation", "action_mask"}
        assert wide.observation_space[agent].contains(obs)


def test_a_non_boolean_flag_is_refused_by_name():
    with pytest.raises(ConfigError, match=AGENT_ID_ARG):
        make_env("toy:coordination", **{AGENT_ID_ARG: "yes"}).make_rllib_env()


def test_last_action_needs_discrete_actions():
    with pytest.raises(ConfigError, match="discrete actions"):
        make_env("toy:continuous_target", **{LAST_ACTION_ARG: True}).make_rllib_env()
