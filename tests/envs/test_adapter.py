import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from marllib_ext.envs import (
    STATE_KEY,
    ParallelEnvAdapter,
    get_env_spec,
    make_env,
    make_parallel_env,
    register_env,
)
from marllib_ext.envs.toy import CoordinationEnv
from marllib_ext.errors import ConfigError
from tests.helpers import BUILTIN_ENVS


def test_toy_env_passes_pettingzoo_parallel_api_test():
    parallel_api_test(CoordinationEnv(), num_cycles=50)


@pytest.mark.parametrize("name", BUILTIN_ENVS)
def test_every_registered_env_builds_and_reports_state(name):
    env = make_env(name).make_rllib_env()
    observations, infos = env.reset(seed=0)
    for agent in observations:
        assert infos[agent][STATE_KEY].shape == env.state_space.shape
    actions = {
        agent: env.action_space[agent].sample(
            obs["action_mask"].astype(np.int8) if isinstance(obs, dict) else None
        )
        for agent, obs in observations.items()
    }
    observations, rewards, terminateds, truncateds, infos = env.step(actions)
    assert set(rewards) >= set(observations)  # turn-taking: rewards also for the waiting
    assert all(infos[agent][STATE_KEY].shape == env.state_space.shape for agent in observations)


def test_state_from_env_state_when_implemented():
    env = ParallelEnvAdapter(CoordinationEnv(), state_source="env")
    _, infos = env.reset(seed=3)
    np.testing.assert_array_equal(infos["agent_0"][STATE_KEY], env.par_env.state())


def test_state_from_sorted_observations_when_env_has_no_state():
    class NoState(CoordinationEnv):
        def state(self):
            raise NotImplementedError

    env = ParallelEnvAdapter(NoState(n_agents=3))
    assert env.state_source == "observations"
    observations, infos = env.reset(seed=0)
    expected = np.concatenate([observations[a] for a in sorted(observations)])
    np.testing.assert_array_equal(infos["agent_2"][STATE_KEY], expected)


def test_mpe_state_equals_mpe2_state():
    # mpe YAML uses state_source=observations because it equals mpe2's own state().
    env = make_env("mpe:simple_spread").make_rllib_env()
    _, infos = env.reset(seed=0)
    np.testing.assert_allclose(infos["agent_0"][STATE_KEY], env.par_env.state(), rtol=1e-6)


def test_make_parallel_env_applies_defaults_and_overrides():
    env = make_parallel_env("mpe:simple_spread", N=4)
    assert len(env.possible_agents) == 4
    assert get_env_spec("mpe:simple_spread").env_args["N"] == 3


def test_marllib_spelling_of_make_env():
    handle = make_env(environment_name="mpe", map_name="simple_reference")
    assert handle.name == "mpe:simple_reference"


def test_unknown_env_suggests_close_names():
    with pytest.raises(ConfigError, match="Did you mean mpe:simple_spread"):
        make_env("mpe:simple_spred")


def test_register_user_env():
    register_env(
        "user:coord3",
        lambda **kw: CoordinationEnv(n_agents=3, **kw),
        team_prefix=("agent_",),
        env_args={"episode_length": 4},
    )
    env = make_parallel_env("user:coord3")
    env.reset(seed=0)
    assert env.episode_length == 4 and len(env.possible_agents) == 3


def test_bad_env_args_name_the_env():
    with pytest.raises(ConfigError, match="toy:coordination"):
        make_parallel_env("toy:coordination", no_such_arg=1)


def test_time_limit_is_reported_as_truncation_only():
    from marllib_ext.envs.adapter import episode_end_flags

    terminateds, truncateds = episode_end_flags({"a": False, "b": False}, {"a": True, "b": True})
    # No per-agent entries: RLlib would otherwise declare the episode terminated.
    assert terminateds == {"__all__": False} and truncateds == {"__all__": True}


def test_mixed_end_keeps_terminated_agents_and_truncates_the_episode():
    from marllib_ext.envs.adapter import episode_end_flags

    terminateds, truncateds = episode_end_flags({"a": True, "b": False}, {"a": False, "b": True})
    assert terminateds == {"a": True, "__all__": False} and truncateds == {"__all__": True}


def test_all_terminated_and_mid_episode_flags():
    from marllib_ext.envs.adapter import episode_end_flags

    assert episode_end_flags({"a": True, "b": True}, {"a": False, "b": False})[0]["__all__"]
    terminateds, truncateds = episode_end_flags({"a": False}, {"a": False})
    assert not terminateds["__all__"] and not truncateds["__all__"]
