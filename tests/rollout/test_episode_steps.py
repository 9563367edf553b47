"""Where each agent's rows sit among a chunk's env steps (``episode_steps``), on RLlib's
own ``MultiAgentEpisode``: agents present throughout, dead, and first observed inside
a chunk cut at any offset (RLlib 2.60 pads a new agent's step map by the absolute env
step under the chunk's lookback)."""

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from marllib_ext.rollout.episode_steps import acting_steps, observed_steps

SPACE = gym.spaces.Box(-1e9, 1e9, (1,), np.float32)
AGENTS = ("a0", "a1")


def episode():
    return MultiAgentEpisode(
        observation_space=dict.fromkeys(AGENTS, SPACE),
        action_space=dict.fromkeys(AGENTS, gym.spaces.Discrete(2)),
        agent_module_ids=dict.fromkeys(AGENTS, "m"),
    )


def step(ep, observing, acting, terminated=()):
    ep.add_env_step(
        observations={a: np.zeros(1, np.float32) for a in observing},
        actions=dict.fromkeys(acting, 0),
        rewards=dict.fromkeys(acting, 1.0),
        infos={a: {} for a in observing},
        terminateds={a: a in terminated for a in acting},
    )


@pytest.mark.parametrize("steps_before_cut", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("lookback", [0, 1, 2])
@pytest.mark.parametrize("arrival", [1, 2, 3])  # inside the chunk, or at its last index
def test_an_agent_first_observed_inside_a_cut_chunk_sits_on_its_env_steps(
    steps_before_cut, lookback, arrival
):
    ep = episode()
    ep.add_env_reset(observations={"a0": np.zeros(1, np.float32)}, infos={"a0": {}})
    for _ in range(steps_before_cut):
        step(ep, ["a0"], ["a0"])
    chunk = ep.cut(len_lookback_buffer=lookback)
    for index in range(1, 4):
        observing = ["a0", "a1"] if index >= arrival else ["a0"]
        step(chunk, observing, [a for a in observing if a == "a0" or index > arrival])
    assert [i for i, _ in observed_steps(chunk, "a1")] == list(range(arrival, 4))
    assert [row for _, row in observed_steps(chunk, "a1")] == list(range(4 - arrival))
    assert [i for i, _ in observed_steps(chunk, "a0")] == [0, 1, 2, 3]
    assert [i for i, _ in acting_steps(chunk, "a1")] == list(range(arrival, 3))


def test_the_minimal_reproduction_literal():
    # a0 alone for 3 env steps, cut with lookback 1; a1 first observed at index 1.
    ep = episode()
    ep.add_env_reset(observations={"a0": np.zeros(1, np.float32)}, infos={"a0": {}})
    for _ in range(3):
        step(ep, ["a0"], ["a0"])
    chunk = ep.cut(len_lookback_buffer=1)
    step(chunk, ["a0", "a1"], ["a0"])
    step(chunk, ["a0", "a1"], ["a0", "a1"])
    step(chunk, ["a0", "a1"], ["a0", "a1"])
    assert observed_steps(chunk, "a1") == [(1, 0), (2, 1), (3, 2)]  # was [(3, 0)]
    # The next chunk carries the map RLlib cut from this one.
    successor = chunk.cut(len_lookback_buffer=1)
    step(successor, ["a0", "a1"], ["a0", "a1"])
    assert observed_steps(successor, "a1") == [(0, 0), (1, 1)]


def test_a_dead_agent_keeps_its_steps_and_an_arrival_after_a_reset_cut():
    ep = episode()
    ep.add_env_reset(observations={"a0": np.zeros(1, np.float32)}, infos={"a0": {}})
    chunk = ep.cut(len_lookback_buffer=1)  # cut right at the reset
    step(chunk, ["a0", "a1"], ["a0"])  # a1 first observed at index 1
    step(chunk, ["a0", "a1"], ["a0", "a1"], terminated=("a0",))  # a0 dies at index 1
    step(chunk, ["a1"], ["a1"])
    assert observed_steps(chunk, "a1") == [(1, 0), (2, 1), (3, 2)]  # was one step early
    assert observed_steps(chunk, "a0") == [(0, 0), (1, 1), (2, 2)]
    assert acting_steps(chunk, "a0") == [(0, 0), (1, 1)]
