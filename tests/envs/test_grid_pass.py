import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from marllib_ext.envs import make_parallel_env
from marllib_ext.envs.grid_pass import PassEnv, scripted_pass_actions


def run_episode(env, policy, seed):
    env.reset(seed=seed)
    total = 0.0
    while env.agents:
        _, rewards, _, _, infos = env.step(policy(env))
        total += sum(rewards.values())
    return total, infos["agent_0"]["success"]


def test_parallel_api_conformance():
    parallel_api_test(PassEnv(), num_cycles=200)


def test_scripted_team_always_solves_it():
    env = make_parallel_env("grid:pass")
    results = [run_episode(env, scripted_pass_actions, seed) for seed in range(50)]
    assert all(success for _, success in results)
    assert all(total == 2.0 for total, _ in results)


def test_random_team_almost_never_solves_it():
    env = make_parallel_env("grid:pass")
    rng = np.random.default_rng(0)

    def random_policy(env):
        return {a: int(rng.integers(5)) for a in env.agents}

    successes = [run_episode(env, random_policy, seed)[1] for seed in range(200)]
    assert np.mean(successes) <= 0.02


def test_door_blocks_without_a_switch_and_opens_with_one():
    env = PassEnv(size=5)
    env.reset(seed=0)
    env.positions = np.array([[1, 2], [0, 0]])  # next to the door (2, 2), nobody on a switch
    env.step({"agent_0": 4, "agent_1": 0})
    assert env.positions[0].tolist() == [1, 2]
    env.positions = np.array([[1, 2], env.switches[0]])  # agent_1 on the left switch
    env.step({"agent_0": 4, "agent_1": 0})
    assert env.positions[0].tolist() == [2, 2]


def test_seeded_resets_repeat():
    first = PassEnv().reset(seed=7)[0]["agent_0"]
    second = PassEnv().reset(seed=7)[0]["agent_0"]
    np.testing.assert_array_equal(first, second)


def test_bad_size_is_rejected():
    with pytest.raises(ValueError, match="size"):
        PassEnv(size=4)
