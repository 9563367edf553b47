"""The adapter's action masks: PettingZoo's dict observations and info masks."""

import numpy as np
import pytest
from gymnasium import spaces

from marllib_ext.envs import STATE_KEY, ParallelEnvAdapter, make_env
from marllib_ext.envs.adapter import EMPTY_ACTION_MASK_KEY
from marllib_ext.envs.toy import CoordinationEnv
from marllib_ext.envs.toy_agents import LegalMovesEnv


def legal_actions(observations):
    return {a: int(np.flatnonzero(o["action_mask"])[0]) for a, o in observations.items()}


@pytest.mark.parametrize("mask_in", ["observation", "info"])
def test_masks_from_dict_observations_and_infos_reach_rllib_as_dicts(mask_in):
    env = ParallelEnvAdapter(LegalMovesEnv(mask_in=mask_in, n_targets=5, n_legal=2))
    assert env.mask_source == mask_in
    space = env.observation_space["agent_0"]
    assert space["observation"] == spaces.Box(0.0, 1.0, (6,), np.float32)
    assert space["action_mask"] == spaces.Box(0.0, 1.0, (5,), np.float32)
    observations, infos = env.reset(seed=1)
    for agent, obs in observations.items():
        assert space.contains(obs)
        np.testing.assert_array_equal(obs["action_mask"], env.par_env.masks[agent])
        # The critic's state carries no mask.
        np.testing.assert_array_equal(infos[agent][STATE_KEY], env.par_env.state())
    observations, *_ = env.step(legal_actions(observations))
    assert observations["agent_1"]["action_mask"].sum() == 2


def test_state_from_observations_leaves_the_masks_out():
    env = ParallelEnvAdapter(LegalMovesEnv(n_targets=4), state_source="observations")
    assert env.state_space.shape == (2 * 5,)
    observations, infos = env.reset(seed=0)
    expected = np.concatenate([observations[a]["observation"] for a in ("agent_0", "agent_1")])
    np.testing.assert_array_equal(infos["agent_0"][STATE_KEY], expected)


def test_an_env_without_masks_is_unchanged():
    env = ParallelEnvAdapter(CoordinationEnv())
    assert env.mask_source == "none"
    assert isinstance(env.observation_space["agent_0"], spaces.Box)
    assert not make_env("toy:coordination").layout.has_action_masks
    assert make_env("toy:legal_moves").layout.has_action_masks


def test_an_all_zero_mask_ends_the_episode_with_a_report():
    env = ParallelEnvAdapter(LegalMovesEnv(empty_mask_at=2))
    observations, _ = env.reset(seed=0)
    for step in range(2):
        observations, _, terminateds, truncateds, infos = env.step(legal_actions(observations))
        if step == 0:
            assert not truncateds["__all__"]
    assert truncateds["__all__"] and not terminateds["__all__"]
    assert infos["agent_1"][EMPTY_ACTION_MASK_KEY] == {"agent_index": 0, "env_step": 2}


def test_an_all_zero_mask_at_reset_is_an_error_naming_the_agent():
    env = ParallelEnvAdapter(LegalMovesEnv(empty_mask_at=0), env_name="toy:legal_moves")
    with pytest.raises(ValueError, match=r"'agent_0' has no legal action .* env step 0"):
        env.reset(seed=0)


def test_masks_need_discrete_actions_and_dict_observations_everywhere():
    with pytest.raises(ValueError, match="action_mask must be one of"):
        ParallelEnvAdapter(CoordinationEnv(), action_mask="yes")
    with pytest.raises(ValueError, match="are not dicts"):
        ParallelEnvAdapter(CoordinationEnv(), action_mask="observation")
