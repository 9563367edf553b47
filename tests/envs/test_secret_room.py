import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from marllib_ext.envs import make_parallel_env
from marllib_ext.envs.secret_room import SecretRoomEnv, scripted_secret_room_actions


def run_episode(env, policy, seed):
    env.reset(seed=seed)
    total = 0.0
    while env.agents:
        _, rewards, _, _, infos = env.step(policy(env))
        total += sum(rewards.values())
    return total, infos["agent_0"]["success"]


def test_parallel_api_conformance():
    parallel_api_test(SecretRoomEnv(), num_cycles=200)


@pytest.mark.parametrize("size", [7, 9, 11])
@pytest.mark.parametrize("target", [0, 1, 2])
def test_scripted_team_solves_every_layout(size, target):
    env = make_parallel_env("grid:secret_room", size=size, target=target)
    results = [run_episode(env, scripted_secret_room_actions, seed) for seed in range(20)]
    assert all(success for _, success in results)
    assert all(total == 2.0 for total, _ in results)


def test_layout_of_the_default_grid():
    env = SecretRoomEnv()  # 9x9: rows 0-2 | wall 3 | rows 4-5 | wall 6 | rows 7-8
    assert env.wall_rows == [3, 6]
    assert env.door_y.tolist() == [1, 4, 7]
    assert env.room_switches.tolist() == [[7, 1], [7, 4], [7, 7]]
    cells = [(5, 0), (8, 5), (6, 8), (5, 3), (3, 4)]
    assert [env.room_of(np.array(c)) for c in cells] == [0, 1, 2, -1, -1]


def test_random_team_almost_never_solves_it():
    env = make_parallel_env("grid:secret_room")
    rng = np.random.default_rng(0)

    def random_policy(env):
        return {a: int(rng.integers(5)) for a in env.agents}

    successes = [run_episode(env, random_policy, seed)[1] for seed in range(200)]
    assert np.mean(successes) <= 0.01


def test_each_switch_opens_its_doors():
    env = SecretRoomEnv()
    env.reset(seed=0)
    env.positions = np.array([[0, 8], [0, 7]])  # nobody on a switch
    assert not env.doors_open().any()
    env.positions = np.array([env.main_switch, [0, 7]])
    assert env.doors_open().all()
    env.positions = np.array([env.room_switches[1], [0, 7]])
    assert env.doors_open().tolist() == [False, True, False]


def test_closed_door_and_walls_block():
    env = SecretRoomEnv()
    env.reset(seed=0)
    env.positions = np.array([[3, 4], [0, 8]])  # next to room 1's door, door closed
    env.step({"agent_0": 4, "agent_1": 0})
    assert env.positions[0].tolist() == [3, 4]
    env.positions = np.array([[3, 4], env.main_switch])  # main switch held
    env.step({"agent_0": 4, "agent_1": 0})
    assert env.positions[0].tolist() == [4, 4]  # in the doorway
    env.positions = np.array([[6, 4], env.main_switch])  # room 1, below it the wall row 3
    env.step({"agent_0": 2, "agent_1": 0})
    assert env.positions[0].tolist() == [6, 4]


def test_only_the_target_room_pays():
    env = SecretRoomEnv(target=2)
    env.reset(seed=0)
    env.positions = np.array([[6, 1], [6, 1]])  # both in room 0
    _, rewards, terminated, _, _ = env.step({"agent_0": 0, "agent_1": 0})
    assert rewards["agent_0"] == 0.0 and not terminated["agent_0"]
    env.positions = np.array([[6, 7], [7, 8]])  # both in room 2
    _, rewards, terminated, _, _ = env.step({"agent_0": 0, "agent_1": 0})
    assert rewards == {"agent_0": 1.0, "agent_1": 1.0} and terminated["agent_0"]


def test_observation_has_no_target():
    observations = [SecretRoomEnv(target=t).reset(seed=3)[0]["agent_0"] for t in range(3)]
    for other in observations[1:]:
        np.testing.assert_array_equal(observations[0], other)


def test_seeded_resets_repeat():
    first = SecretRoomEnv().reset(seed=7)[0]["agent_0"]
    second = SecretRoomEnv().reset(seed=7)[0]["agent_0"]
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize(
    "kwargs, field", [({"size": 8}, "size"), ({"size": 5}, "size"), ({"target": 3}, "target")]
)
def test_bad_arguments_are_rejected(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SecretRoomEnv(**kwargs)
