"""Episode chunks read back as rollout blocks (``rollout.episode_blocks``), on
hand-built ``MultiAgentEpisode`` chunks whose arrays are known: agents that take turns
and earn rewards between their turns, an agent that dies while its world goes on, an
agent that arrives late, a chunk cut by the sampler, costs, and how chunks are grouped
into blocks."""

import numpy as np
import pytest
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from marllib_ext.envs.adapter import COST_KEY, STATE_KEY, STEP_REWARDS_KEY, TEAM_COST_KEY
from marllib_ext.postprocessing.block_batch import present_rewards
from marllib_ext.rollout.episode_blocks import NO_STATE, blocks_of_chunks


def _obs(agent: str, t: int) -> np.ndarray:
    return np.array([t, ord(agent[-1])], np.float32)


def _state(t: int) -> np.ndarray:
    return np.array([10.0 + t], np.float32)


def _info(t: int, step_rewards=None, cost=None) -> dict:
    info = {STATE_KEY: _state(t)}
    if step_rewards is not None:
        info[STEP_REWARDS_KEY] = step_rewards
    if cost is not None:
        info[COST_KEY], info[TEAM_COST_KEY] = cost
    return info


def _episode(script, steps: int, *, done=None) -> MultiAgentEpisode:
    """``script(t)`` -> ``(observing agents at index t, step_rewards after step t - 1,
    terminated agents at index t, cost)``; each observing agent acts unless terminated
    or ``t == steps``. ``done``: ``None`` (cut), ``"terminated"`` or ``"truncated"``."""
    episode = MultiAgentEpisode(agent_to_module_mapping_fn=lambda agent, episode: "shared")
    observing, _, _, cost = script(0)
    episode.add_env_reset(
        observations={a: _obs(a, 0) for a in observing},
        infos={a: _info(0) for a in observing},
    )
    acting = [a for a in observing]
    for t in range(1, steps + 1):
        observing, step_rewards, dying, cost = script(t)
        last = t == steps
        episode.add_env_step(
            observations={a: _obs(a, t) for a in observing},
            actions={a: t % 2 for a in acting},
            rewards={a: step_rewards.get(a, 0.0) for a in observing},
            infos={a: _info(t, step_rewards, cost) for a in observing},
            terminateds={
                **{a: a in dying for a in observing},
                "__all__": last and done == "terminated",
            },
            truncateds={"__all__": last and done == "truncated"},
            extra_model_outputs={a: {Columns.ACTION_LOGP: -0.1 * t} for a in acting},
        )
        acting = [a for a in observing if a not in dying]
    return episode


def test_turn_taking_agents_act_at_their_steps_and_earn_rewards_between_them():
    def script(t):  # a at even steps, b at odd, both at the end; both rewarded every step
        observing = ["a", "b"] if t == 4 else ["a"] if t % 2 == 0 else ["b"]
        return observing, {"a": 1.0 + t, "b": 0.5}, [], None

    (block,) = blocks_of_chunks([_episode(script, 4, done="truncated")])
    assert block.agents == ["a", "b"] and block.terminated.shape == (4, 1)
    np.testing.assert_array_equal(block.alive[:, 0], [[1, 0], [0, 1], [1, 0], [0, 1]])
    np.testing.assert_array_equal(block.states[:, 0, 0], [10, 11, 12, 13])
    np.testing.assert_array_equal(block.next_states[:, 0, 0], [11, 12, 13, 14])
    # The team reward: both agents' rewards at every env step.
    np.testing.assert_allclose(present_rewards(block, [0, 1]).sum(-1)[:, 0], [2.5, 3.5, 4.5, 5.5])
    np.testing.assert_array_equal(block.observations["a"][[0, 2], 0, 0], [0, 2])
    np.testing.assert_array_equal(block.actions["b"][[1, 3], 0], [0, 0])
    np.testing.assert_allclose(block.outputs["a"][Columns.ACTION_LOGP][[0, 2], 0], [-0.1, -0.3])
    # After step t the agent whose turn comes next observes (the critic's next state).
    np.testing.assert_array_equal(block.present_after()[:, 0], [[0, 1], [1, 0], [0, 1], [1, 1]])
    assert block.truncated[-1, 0] and not block.terminated.any() and block.starts[0, 0]


def test_an_agent_that_dies_while_its_world_goes_on_and_a_late_arrival():
    def script(t):
        observing = ["a"] + (["b"] if t <= 2 else []) + (["c"] if t >= 2 else [])
        return observing, {a: float(t) for a in observing}, (["b"] if t == 2 else []), (t, 2 * t)

    (block,) = blocks_of_chunks([_episode(script, 4)])  # cut by the sampler
    b, c = block.agents.index("b"), block.agents.index("c")
    np.testing.assert_array_equal(block.alive[:, 0, b], [1, 1, 0, 0])
    np.testing.assert_array_equal(block.died[:, 0, b], [0, 1, 0, 0])
    np.testing.assert_array_equal(block.alive[:, 0, c], [0, 0, 1, 1])
    np.testing.assert_array_equal(block.present_after()[:, 0, b], [1, 0, 0, 0])
    np.testing.assert_array_equal(block.present_after()[:, 0, c], [0, 1, 1, 1])  # arrives
    np.testing.assert_array_equal(block.next_observations["c"][:, 0, 0], [0, 2, 3, 4])
    assert not (block.terminated | block.truncated).any()  # a cut: the block's end
    np.testing.assert_allclose(block.costs[:, 0, 0], [1, 2, 3, 4])
    np.testing.assert_allclose(block.team_costs[:, 0, 0], [2, 4, 6, 8])


def test_a_team_terminates_where_every_agent_of_the_chunk_did():
    def script(t):
        return ["a", "b"], {"a": 1.0, "b": 1.0}, (["a", "b"] if t == 3 else []), None

    (block,) = blocks_of_chunks([_episode(script, 3, done="terminated")])
    assert block.terminated[-1, 0] and not block.truncated.any() and not block.died.any()
    np.testing.assert_array_equal(block.present_after()[-1, 0], [0, 0])


def test_chunks_of_equal_length_share_a_block():
    def script(t):
        return ["a", "b"], {"a": 1.0, "b": 2.0}, [], None

    chunks = [_episode(script, 3), _episode(script, 3), _episode(script, 5)]
    blocks = blocks_of_chunks(chunks)
    assert [block.terminated.shape for block in blocks] == [(3, 2), (5, 1)]
    assert sum(block.env_steps() for block in blocks) == 11


def test_a_chunk_without_the_global_state_is_an_error():
    episode = MultiAgentEpisode(agent_to_module_mapping_fn=lambda agent, episode: "shared")
    episode.add_env_reset(observations={"a": _obs("a", 0)}, infos={"a": {}})
    episode.add_env_step(
        observations={"a": _obs("a", 1)}, actions={"a": 0}, rewards={"a": 0.0},
        infos={"a": {}}, extra_model_outputs={"a": {Columns.ACTION_LOGP: 0.0}},
    )  # fmt: skip
    with pytest.raises(ValueError, match="global state"):
        blocks_of_chunks([episode])
    assert "info['state']" in NO_STATE
