"""``CopiesWorld``: copies of a plain PettingZoo env behind the adapter as one array
world. Its arrays are what stepping each adapter on its own reports (observations,
state, rewards, costs, ends, agents that leave), and it names what it cannot carry."""

import numpy as np
import pytest

from marllib_ext.envs.adapter import COST_KEY, STATE_KEY, TEAM_COST_KEY, ParallelEnvAdapter
from marllib_ext.envs.copies import CopiesWorld
from marllib_ext.envs.toy import CoordinationEnv
from marllib_ext.envs.toy_agents import ComeAndGoEnv


def _adapters(make, count):
    return [ParallelEnvAdapter(make()) for _ in range(count)]


def test_arrays_are_what_each_adapter_reports():
    """Three copies of an env whose ``agent_1`` dies after step 3 (its world goes on),
    with costs; world 1 gets other actions than the reference's world 1."""

    def make():
        return ComeAndGoEnv(episode_length=6, death_step=3, arrival_step=None, costs=True)

    world = CopiesWorld(_adapters(make, 3))
    reference = _adapters(make, 3)
    first = world.reset_arrays(seed=5)
    for b, adapter in enumerate(reference):
        observations, infos = adapter.reset(seed=5 + b)
        for agent, obs in observations.items():
            np.testing.assert_array_equal(first.observations[agent][b], obs)
        np.testing.assert_array_equal(first.state[b], infos["agent_0"][STATE_KEY])
    rng = np.random.default_rng(0)
    present = [set(world.agents) for _ in range(3)]
    for t in range(6):
        actions = {agent: rng.integers(0, 2, size=3) for agent in world.agents}
        step = world.step_arrays(actions)
        for b, adapter in enumerate(reference):
            observations, rewards, terminateds, truncateds, infos = adapter.step(
                {agent: actions[agent][b] for agent in present[b]}
            )
            for agent in present[b]:
                assert step.rewards[agent][b] == rewards[agent]
                np.testing.assert_array_equal(step.observations[agent][b], observations[agent])
                assert step.costs[agent][b] == infos[agent][COST_KEY]
                assert step.team_costs[agent][b] == infos[agent][TEAM_COST_KEY]
            np.testing.assert_array_equal(step.state[b], next(iter(infos.values()))[STATE_KEY])
            assert step.terminated[b] == terminateds["__all__"]
            assert step.truncated[b] == truncateds["__all__"]
            if t == 3:  # agent_1 leaves while its world goes on
                assert step.died["agent_1"][b] and not step.died["agent_0"][b]
                present[b].discard("agent_1")
            else:
                assert not any(step.died[agent][b] for agent in world.agents)
        assert step.success is None  # the env reports none
    assert step.truncated.all()
    restarted = world.reset_worlds(np.array([1]))
    np.testing.assert_array_equal(
        restarted.observations["agent_1"][1], reference[1].reset()[0]["agent_1"]
    )


def test_refusals_name_what_the_arrays_cannot_carry():
    assert CopiesWorld(_adapters(CoordinationEnv, 2)).refusal(seed=0) is None
    late = CopiesWorld(_adapters(lambda: ComeAndGoEnv(arrival_step=2), 2))
    assert late.refusal(seed=0) == "agents ['agent_2'] are absent at an episode's start"
    turns = CopiesWorld(_adapters(CoordinationEnv, 2), turn_based=True)
    assert turns.refusal(seed=0) == "agents take turns (an AEC env)"

    class Chatty(CoordinationEnv):
        def step(self, actions):
            *results, infos = super().step(actions)
            return (*results, {agent: {"debug": 1} for agent in infos})

    chatty = CopiesWorld(_adapters(Chatty, 2))
    assert chatty.refusal(seed=0) == "the env's infos carry entries the arrays drop: ['debug']"
    # A runner that hands rollout blocks: the learner reads no infos.
    assert chatty.refusal(seed=0, infos_read=False) is None


def test_an_agent_absent_at_a_start_is_named():
    world = CopiesWorld(_adapters(lambda: ComeAndGoEnv(arrival_step=2), 2))
    with pytest.raises(ValueError, match=r"agents \['agent_2'\] are absent"):
        world.reset_arrays(seed=0)
