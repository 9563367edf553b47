"""The magent:<task> family (extra magent): presets, teams, a fixed opponent team."""

import pytest

from marllib_ext import make_env
from marllib_ext.envs.magent import MAGENT_TASKS
from marllib_ext.errors import ConfigError

pytest.importorskip("magent2", reason="the magent extra is not installed")

SMALL_TASKS = [t for t in MAGENT_TASKS if t not in ("gather_v5", "battlefield_v5")]


@pytest.mark.parametrize("task", SMALL_TASKS)
def test_small_presets_build_with_teams_by_prefix(task):
    env = make_env(f"magent:{task}")
    layout = env.layout
    assert set(layout.teams) == set(MAGENT_TASKS[task].teams)
    assert len(layout.agents) <= 12
    assert all(len(space.shape) == 1 for space in layout.observation_spaces.values())
    assert env.spec.episode_limit(env.env_args) == 100
    rllib_env = env.make_rllib_env()
    observations, infos = rllib_env.reset(seed=0)
    assert set(observations) == set(layout.agents)


def test_a_random_opponent_team_is_hidden_and_played():
    env = make_env("magent:battle_v4", opponent="random")
    assert env.layout.agents == ("red_0", "red_1")
    rllib_env = env.make_rllib_env()
    observations, _ = rllib_env.reset(seed=0)
    inner = rllib_env.par_env
    for _ in range(5):
        observations, rewards, *_ = rllib_env.step({a: 0 for a in observations})
        assert set(rewards) <= {"red_0", "red_1"}
    # The blue agents are still in the battle, played by the fixed policy.
    assert {"blue_0", "blue_1"} <= set(inner.env.agents)


def test_bad_opponents_and_tasks_are_named():
    with pytest.raises(ConfigError, match="opponent must be 'random' or 'checkpoint:<path>'"):
        make_env("magent:battle_v4", opponent="greedy").make_rllib_env()
    with pytest.raises(ConfigError, match="opponent_team 'green' is not a team"):
        make_env("magent:battle_v4", opponent="random", opponent_team="green").make_rllib_env()
    with pytest.raises(ConfigError, match="unknown MAgent2 task 'battle_v9'"):
        make_env("magent:battle_v9")
    with pytest.raises(ConfigError, match="holds no policies"):
        make_env("magent:battle_v4", opponent="checkpoint:/nonexistent").make_rllib_env()
