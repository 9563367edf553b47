"""Google Research Football (a source build of gfootball, docs/envs.md): MARLlib's
scenarios and player counts, simple115v2, scoring and checkpoint rewards, goals
reported as success, the time limit as truncation, episodes replayed from the seed."""

import numpy as np
import pytest

from marllib_ext import algos, make_env
from marllib_ext.envs.adapter import STATE_KEY

pytest.importorskip("gfootball", reason="gfootball is not installed (docs/envs.md)")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

SHOT = 12  # gfootball's default action set: action_shot
IDLE = 0


def _play(env, policy, seed):
    observations, infos = env.reset(seed=seed)
    trace = []
    while True:
        actions = {a: policy(a) for a in observations}
        observations, rewards, terminated, truncated, infos = env.step(actions)
        trace.append((sorted(observations), [o.copy() for o in observations.values()], rewards))
        if terminated["__all__"] or truncated["__all__"]:
            return trace, terminated, truncated, infos


def test_3_vs_1_controls_three_players_with_simple115v2():
    env = make_env("grf:academy_3_vs_1_with_keeper").make_rllib_env()
    observations, infos = env.reset(seed=0)
    assert sorted(observations) == ["agent_0", "agent_1", "agent_2"]
    for agent, observation in observations.items():
        assert observation.shape == (115,)
        assert env.get_action_space(agent).n == 19
        assert infos[agent][STATE_KEY].shape == (3 * 115,)
    # simple115v2 tells each player which one it is (entries 97-107: the active player).
    active = [int(np.argmax(observations[a][97:108])) for a in sorted(observations)]
    assert len(set(active)) == 3


def test_a_seed_replays_its_episode():
    env = make_env("grf:academy_3_vs_1_with_keeper").make_rllib_env()
    rng = np.random.default_rng(0)
    first = _play(env, lambda a: int(rng.integers(19)), seed=3)[0]
    rng = np.random.default_rng(0)
    second = _play(env, lambda a: int(rng.integers(19)), seed=3)[0]
    assert len(first) == len(second)
    for step_1, step_2 in zip(first, second, strict=True):
        assert step_1[0] == step_2[0] and step_1[2] == step_2[2]  # agents, rewards
        for a, b in zip(step_1[1], step_2[1], strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_goal_terminates_with_success_and_the_scoring_reward():
    env = make_env("grf:academy_empty_goal_close").make_rllib_env()
    trace, terminated, truncated, infos = _play(env, lambda a: SHOT, seed=0)
    assert terminated["__all__"] and not truncated["__all__"]
    assert infos["agent_0"]["success"] is True
    assert trace[-1][2]["agent_0"] >= 1.0  # the goal (+1), checkpoints before it


def test_the_time_limit_truncates_without_success():
    """Standing still with the ball on an empty pitch ends at ``game_duration``."""
    env = make_env("grf:academy_run_to_score").make_rllib_env()
    trace, terminated, truncated, infos = _play(env, lambda a: IDLE, seed=0)
    assert truncated["__all__"] and not terminated["__all__"]
    assert len(trace) > 400
    assert infos["agent_0"]["success"] is False


def test_unknown_scenario_is_refused_by_name():
    with pytest.raises(Exception, match="academy_nowhere"):
        make_env("grf:academy_nowhere")


@pytest.mark.parametrize("name", ["mappo", "ippo", "qmix"])
def test_trains_two_iterations_on_3_vs_1(ray_session, tmp_path, name):
    small = {"train_batch_size": 400, "minibatch_size": 200, "num_env_runners": 0}
    result = algos.get(name, **(small if name != "qmix" else {})).fit(
        make_env("grf:academy_3_vs_1_with_keeper"),
        stop={"training_iteration": 2},
        local_dir=tmp_path,
        seed=0,
    )
    assert result.final["training_iteration"] == 2
    assert np.isfinite(result.final["episode_return_mean"])
