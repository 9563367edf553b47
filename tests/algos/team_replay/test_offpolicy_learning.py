"""Off-policy families learn small tasks a uniformly random team cannot solve (slow)."""

import pytest

from marllib_ext import algos
from tests.algos.ppo.test_continuous import random_team_return

# toy:coordination (2 agents, 3 targets, 10 steps): random team 10/9 per agent, best 10.
RANDOM_COORDINATION = 10 / 9


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qmix", "vdn", "iql"])
def test_joint_q_learns_coordination(ray_session, tmp_path, name):
    result = algos.get(
        name, num_env_runners=0, epsilon_timesteps=3000, target_network_update_freq=50
    ).fit(
        "toy:coordination",
        stop={"timesteps_total": 8000},
        seed=0,
        local_dir=tmp_path,
        checkpoint_end=False,
    )
    assert result.final["agent_return_mean"] > 5 * RANDOM_COORDINATION, result.progress


@pytest.mark.slow
@pytest.mark.parametrize("name", ["iddpg", "maddpg", "facmac"])
def test_deterministic_actor_critics_track_the_target(ray_session, tmp_path, name):
    random_return = random_team_return()  # about -6.7 per agent
    result = algos.get(name, num_env_runners=0, learning_starts=8, batch_episode=16).fit(
        "toy:continuous_target",
        stop={"timesteps_total": 8000},
        seed=0,
        local_dir=tmp_path,
        checkpoint_end=False,
    )
    assert result.final["agent_return_mean"] > random_return + 3.0, result.progress
