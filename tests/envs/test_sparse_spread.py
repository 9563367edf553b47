import numpy as np
from pettingzoo.test import parallel_api_test

from marllib_ext.envs import make_env, make_parallel_env
from marllib_ext.envs.sparse_spread import SparseSpreadEnv


def test_parallel_api_conformance():
    parallel_api_test(SparseSpreadEnv(), num_cycles=30)


def test_reward_is_one_exactly_when_every_landmark_is_covered():
    env = SparseSpreadEnv(radius=0.1)
    env.reset(seed=0)
    world = env._env.unwrapped.world
    for agent, landmark in zip(world.agents, world.landmarks, strict=True):
        agent.state.p_pos = landmark.state.p_pos.copy()
        agent.state.p_vel = np.zeros(2)
    _, rewards, _, _, infos = env.step({a: 0 for a in env.agents})
    assert set(rewards.values()) == {1.0} and infos["agent_0"]["success"]
    world.agents[0].state.p_pos = world.landmarks[0].state.p_pos + 1.0
    _, rewards, _, _, _ = env.step({a: 0 for a in env.agents})
    assert set(rewards.values()) == {0.0}


def test_random_team_almost_never_covers_all_landmarks():
    env = make_parallel_env("mpe:sparse_spread")
    rng = np.random.default_rng(0)
    rewarded = steps = 0
    for seed in range(40):
        env.reset(seed=seed)
        while env.agents:
            _, rewards, *_ = env.step({a: int(rng.integers(5)) for a in env.agents})
            rewarded += rewards["agent_0"] > 0
            steps += 1
    assert rewarded / steps < 0.01


def test_global_state_comes_through_the_adapter():
    adapter = make_env("mpe:sparse_spread").make_rllib_env()
    _, infos = adapter.reset(seed=0)
    assert infos["agent_0"]["state"].shape == adapter.state_space.shape
