"""Collision cost of mpe:simple_spread and the adapter's team cost."""

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from marllib_ext.envs import make_parallel_env
from marllib_ext.envs.adapter import COST_KEY, TEAM_COST_KEY, ParallelEnvAdapter, team_cost
from marllib_ext.envs.costs import mpe_collision_counts


def test_simple_spread_passes_api_test_and_reports_costs():
    env = make_parallel_env("mpe:simple_spread")
    parallel_api_test(env, num_cycles=30)
    env.reset(seed=0)
    _, _, _, _, infos = env.step({a: 0 for a in env.agents})
    assert all(COST_KEY in info for info in infos.values())


def test_overlapping_agents_cost_one_per_overlapped_agent():
    env = make_parallel_env("mpe:simple_spread", collision_cost=2.0)
    env.reset(seed=0)
    world = env.unwrapped.world
    a0, a1, a2 = world.agents
    a0.state.p_pos = np.array([0.0, 0.0])
    a1.state.p_pos = np.array([0.1, 0.0])  # overlaps a0 (sizes 0.15 + 0.15)
    a2.state.p_pos = np.array([0.9, 0.9])  # far away
    assert mpe_collision_counts(world).tolist() == [1, 1, 0]
    for agent in world.agents:
        agent.state.p_vel = np.zeros(2)
    _, _, _, _, infos = env.step({a: 0 for a in env.agents})  # no-op: positions unchanged
    assert [infos[a][COST_KEY] for a in ("agent_0", "agent_1", "agent_2")] == [2.0, 2.0, 0.0]


def test_collision_cost_rejects_negative_weight():
    with pytest.raises(ValueError, match="collision_cost"):
        make_parallel_env("mpe:simple_spread", collision_cost=-1.0)


def test_adapter_sums_team_cost_and_rejects_bad_costs():
    env = ParallelEnvAdapter(make_parallel_env("mpe:simple_spread"))
    env.reset(seed=1)
    for _ in range(5):
        _, _, _, _, infos = env.step({a: 1 for a in env.par_env.agents})
        agents = [a for a in infos if a != "__common__"]
        expected = sum(infos[a][COST_KEY] for a in agents)
        assert {infos[a][TEAM_COST_KEY] for a in agents} == {expected}
    assert team_cost({"a": 1, "b": 0.5}) == 1.5
    with pytest.raises(ValueError, match="info\\['cost'\\] of agent 'b'.*finite"):
        team_cost({"a": 1.0, "b": float("nan")})
    with pytest.raises(ValueError, match="info\\['cost'\\] of agent 'a' is not a number"):
        team_cost({"a": "high"})
