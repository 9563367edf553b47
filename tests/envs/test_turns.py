"""Turn-taking (AEC) envs behind the parallel API: one agent observes per step."""

import numpy as np
import pytest

from marllib_ext import make_env
from marllib_ext.envs.adapter import STATE_KEY, STEP_REWARDS_KEY, ParallelEnvAdapter
from marllib_ext.envs.toy_agents import TakeTurnsEnv
from marllib_ext.envs.turns import TurnBasedParallelEnv


def play(env, seed=0):
    observations, _ = env.reset(seed=seed)
    steps = []
    while True:
        actions = {a: int(np.flatnonzero(o["action_mask"])[0]) for a, o in observations.items()}
        observations, rewards, terminateds, truncateds, infos = env.step(actions)
        steps.append((actions, observations, rewards, terminateds, truncateds, infos))
        if terminateds.get("__all__") or truncateds.get("__all__"):
            return steps


def test_only_the_player_to_move_observes_and_everyone_gets_rewards():
    env = ParallelEnvAdapter(TurnBasedParallelEnv(TakeTurnsEnv(players=3, rounds=2)))
    steps = play(env)
    assert len(steps) == 6
    movers = [next(iter(actions)) for actions, *_ in steps]
    assert movers == ["player_0", "player_1", "player_2"] * 2
    for (_, observations, rewards, _, truncateds, infos), k in zip(steps, range(6), strict=True):
        assert set(rewards) == {"player_0", "player_1", "player_2"}
        if k < 5:
            assert list(observations) == [movers[k + 1]]  # the next mover only
        else:  # the end: every player gets its final observation, truncated
            assert set(observations) == set(rewards) and truncateds["__all__"]
        for info in infos.values():
            assert info[STEP_REWARDS_KEY] == rewards


@pytest.mark.parametrize("source", ["observations", "latest_observations"])
def test_the_state_holds_the_movers_view_and_the_others_zeros_or_last_views(source):
    env = ParallelEnvAdapter(TurnBasedParallelEnv(TakeTurnsEnv(players=3)), state_source=source)
    observations, infos = env.reset(seed=1)
    last = {}
    for _ in range(5):
        (mover,) = observations
        last[mover] = observations[mover]["observation"]
        parts = np.split(infos[mover][STATE_KEY], 3)
        for index, agent in enumerate(["player_0", "player_1", "player_2"]):
            if agent == mover:
                want = last[mover]
            elif source == "latest_observations" and agent in last:
                want = last[agent]
            else:
                want = np.zeros(5, np.float32)
            np.testing.assert_array_equal(parts[index], want)
        legal = int(np.flatnonzero(observations[mover]["action_mask"])[0])
        observations, _, _, _, infos = env.step({mover: legal})
        observations = {a: o for a, o in observations.items() if o["action_mask"].any()}
    env.reset(seed=2)  # a new episode forgets the last one's views
    assert env.latest_parts.keys() == {"player_0"}


def test_moving_out_of_turn_is_an_error():
    env = TurnBasedParallelEnv(TakeTurnsEnv())
    env.reset(seed=0)
    with pytest.raises(ValueError, match="it is 'player_0'.s turn"):
        env.step({"player_1": 0})


def test_turn_based_envs_sample_complete_episodes():
    from marllib_ext import algos

    config = algos.mappo(hyperparam_source="toy").rllib_config("toy:take_turns")
    assert config.batch_mode == "complete_episodes"
    assert make_env("toy:take_turns").spec.turn_based


def test_hanabi_presets_are_turn_based_with_masks():
    pytest.importorskip("pyspiel", reason="the hanabi extra is not installed")
    env = make_env("hanabi:small")
    assert env.spec.turn_based and env.layout.has_action_masks
    assert env.layout.agents == ("player_0", "player_1")
    assert env.make_rllib_env().state_source == "latest_observations"  # every hand
    steps = play(env.make_rllib_env())
    assert all(len(observations) >= 1 for _, observations, *_ in steps)


def test_independent_team_replay_refuses_turn_taking_envs():
    from marllib_ext import algos
    from marllib_ext.errors import ConfigError

    with pytest.raises(ConfigError, match="iql bootstraps each agent from the next env step"):
        algos.get("iql").rllib_config("toy:take_turns")
    # iddpg (continuous actions) carries the same refusal.
    assert not algos.ALGORITHMS["iddpg"].capabilities.turn_based


def test_the_state_source_is_an_env_argument_checked_by_name():
    from marllib_ext.errors import ConfigError

    env = make_env("toy:take_turns", state_source="latest_observations").make_rllib_env()
    assert env.state_source == "latest_observations"
    assert make_env("toy:take_turns").make_rllib_env().state_source == "observations"
    with pytest.raises(ConfigError, match="env argument state_source must be one of"):
        make_env("toy:take_turns", state_source="everything").make_rllib_env()
