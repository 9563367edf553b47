"""The magent:<task> family (extra magent): presets, teams, a fixed opponent team."""

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.utils.env import ParallelEnv

from marllib_ext import make_env
from marllib_ext.envs.magent import MAGENT_TASKS, FixedOpponent, FlatMAgent
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


class ScriptedBattle(ParallelEnv):
    """red_0 against blue_0 and blue_1; blue_1 dies at step 2, the battle ends at 4."""

    possible_agents = ["red_0", "blue_0", "blue_1"]

    def observation_space(self, agent):
        return gym.spaces.Box(0, 10, (1,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return {a: np.zeros(1, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        dies = {"blue_1"} if self.t == 2 else set()
        done = self.t >= 4
        terminations = {a: a in dies for a in self.agents}
        truncations = {a: done for a in self.agents}
        observations = {a: np.full(1, self.t, np.float32) for a in self.agents}
        self.agents = [] if done else [a for a in self.agents if a not in dies]
        rewards = {a: 0.0 for a in observations}
        return observations, rewards, terminations, truncations, {a: {} for a in observations}


def test_the_fixed_opponent_records_which_of_its_agents_died():
    env = FixedOpponent(ScriptedBattle(), ("blue_",), lambda agent, obs: 0)
    env.reset(seed=0)
    for step in range(1, 5):
        observations, *_ = env.step({"red_0": 1})
        assert set(observations) == {"red_0"}  # the opponents stay hidden
        assert env.opponents_dead == (set() if step < 2 else {"blue_1"})
    env.reset(seed=1)
    assert env.opponents_dead == set()


def test_state_of_a_battle_with_a_team_wiped_out_has_zero_layers_for_it():
    """MAgent2's own state() fails once a team has no agents left (seen in training)."""
    flat = make_env("magent:battle_v4").make_rllib_env().par_env
    while not isinstance(flat, FlatMAgent):
        flat = flat.env
    flat.reset(seed=0)
    magent = flat.env.unwrapped
    full = flat.state()
    real_get_pos = magent.env.get_pos
    wiped = magent._all_handles[1]
    magent.env.get_pos = lambda h: [] if h.value == wiped.value else real_get_pos(h)
    try:
        state = flat.state()
    finally:
        magent.env.get_pos = real_get_pos
    assert state.shape == full.shape
    layers = state.reshape(magent.base_state.shape)
    assert not layers[:, :, 1 + wiped.value * 2].any()  # the wiped team's positions
    assert layers[:, :, 1].any()  # the other team's are still there
