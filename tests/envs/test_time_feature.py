"""``time_feature=true``: the share of the episode left, on every observation and the state."""

import numpy as np
import pytest

from marllib_ext import make_env
from marllib_ext.envs import register_env
from marllib_ext.envs.time_feature import time_left
from marllib_ext.envs.toy import CoordinationEnv
from marllib_ext.errors import ConfigError

register_env("test:no_limit", CoordinationEnv)


def test_time_left_literals():
    assert time_left(0, 25) == 1.0
    assert time_left(5, 25) == pytest.approx(0.8)
    assert time_left(25, 25) == 0.0
    assert time_left(30, 25) == 0.0


def test_mpe_observations_and_state_carry_the_time_left():
    plain = make_env("mpe:simple_spread", max_cycles=10)
    timed = make_env("mpe:simple_spread", max_cycles=10, time_feature=True)
    agents = plain.layout.agents
    for agent in agents:
        before = plain.layout.observation_spaces[agent]
        after = timed.layout.observation_spaces[agent]
        assert after.shape == (before.shape[0] + 1,)
        assert after.low[-1] == 0.0 and after.high[-1] == 1.0
    env, reference = timed.make_rllib_env(), plain.make_rllib_env()
    obs, infos = env.reset(seed=3)
    ref_obs, _ = reference.reset(seed=3)
    for step in range(10):
        for agent in agents:
            np.testing.assert_array_equal(obs[agent][:-1], ref_obs[agent])
            assert obs[agent][-1] == pytest.approx((10 - step) / 10)
            assert infos[agent]["state"][-1] == pytest.approx((10 - step) / 10)
        actions = {agent: step % 5 for agent in agents}
        obs, _, _, truncated, infos = env.step(actions)
        ref_obs, *_ = reference.step(actions)
    assert truncated["__all__"]


def test_env_state_gets_the_time_left_too():
    handle = make_env("grid:pass", size=5, max_steps=4, time_feature=True)
    env = handle.make_rllib_env()
    _, infos = env.reset(seed=0)
    state_dim = handle.layout.state_space.shape[0]
    assert make_env("grid:pass", size=5, max_steps=4).layout.state_space.shape[0] == state_dim - 1
    assert all(info["state"][-1] == 1.0 for info in infos.values())
    _, _, _, _, infos = env.step({agent: 0 for agent in handle.layout.agents})
    assert all(info["state"][-1] == pytest.approx(0.75) for info in infos.values())


def test_bad_time_feature_arguments_name_the_field():
    with pytest.raises(ConfigError, match="time_feature must be true or false"):
        make_env("mpe:simple_spread", time_feature="yes").make_rllib_env()
    with pytest.raises(ConfigError, match="declares no episode limit; time_feature"):
        make_env("test:no_limit", time_feature=True).make_rllib_env()
