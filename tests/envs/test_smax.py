"""SMAX (extra smax): battles against the heuristic enemy, with action masks, dead units
absent, SMAX's world state and wins reported; one batched simulator per env runner."""

import math

import numpy as np
import pytest

from marllib_ext import algos, make_env
from marllib_ext.envs.adapter import STATE_KEY
from marllib_ext.envs.batched import BatchedVectorEnv

pytest.importorskip("jaxmarl", reason="the smax extra is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def _legal(observations, rng):
    return {a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in observations.items()}


def test_spaces_masks_and_state_of_3m():
    env = make_env("smax:3m").make_rllib_env()
    observations, infos = env.reset(seed=0)
    assert sorted(observations) == ["ally_0", "ally_1", "ally_2"]
    for agent, observation in observations.items():
        assert observation["observation"].shape == (75,)
        assert observation["action_mask"].shape == (8,)
        assert env.get_action_space(agent).n == 8
        assert infos[agent][STATE_KEY].shape == (72,)
    # At the start no enemy is in range: no-op, stop and the four moves.
    np.testing.assert_array_equal(observations["ally_0"]["action_mask"], [1] * 5 + [0] * 3)


def test_a_dead_unit_terminates_and_leaves_and_a_lost_battle_is_no_success():
    env = make_env("smax:3m").make_rllib_env()
    rng = np.random.default_rng(0)
    observations, _ = env.reset(seed=1)
    present = set(observations)
    deaths = 0
    while True:
        observations, rewards, terminated, truncated, infos = env.step(_legal(observations, rng))
        dead = {a for a in present if terminated.get(a)}
        assert set(observations) == present  # the dying units report their last step
        deaths += len(dead)
        if terminated["__all__"] or truncated["__all__"]:
            break
        present -= dead
        assert present
    assert deaths > 0  # random play loses units
    won = [info["success"] for info in infos.values()]
    assert len(set(won)) == 1
    assert terminated["__all__"] and not truncated["__all__"]


def test_the_time_limit_truncates():
    """No-ops keep both sides out of range; SMAX ends the battle after its step counter
    passes ``max_steps`` (``max_steps + 1`` steps)."""
    env = make_env("smax:3m", max_steps=3).make_rllib_env()
    observations, _ = env.reset(seed=0)
    for step in range(1, 5):
        observations, _, terminated, truncated, infos = env.step({a: 0 for a in observations})
        assert truncated["__all__"] == (step == 4)
        assert not terminated["__all__"]
    assert [info["success"] for info in infos.values()] == [False] * 3


def test_one_batched_simulator_per_runner_resets_ended_battles(ray_session):
    # Rollout blocks, as mappo takes them; episode chunks, as learners reading episodes get.
    for sampler in ("auto", "episode_chunks"):
        config = algos.mappo(train_batch_size=200, minibatch_size=100, num_epochs=1).rllib_config(
            make_env("smax:3m", max_steps=10), seed=0, num_env_runners=0,
            num_envs_per_env_runner=4, sampler=sampler,
        )  # fmt: skip
        algorithm = config.build_algo()
        try:
            runner = algorithm.env_runner
            assert isinstance(runner.env, BatchedVectorEnv) and runner.env.world.num_envs == 4
            assert runner.array_rollout is not None, runner.sampling
            if sampler == "auto":
                (block,) = runner.sample(num_timesteps=120, explore=True)
                assert block.terminated.any() or block.truncated.any()
                for agent, masks in block.action_masks.items():  # legal actions where present
                    present = block.alive[:, :, block.agents.index(agent)]
                    chosen = np.take_along_axis(masks, block.actions[agent][..., None], -1)
                    assert (chosen[..., 0][present] == 1).all()
                continue
            episodes = runner.sample(num_timesteps=120, explore=True)
            ended = [e for e in episodes if e.is_done]
            assert ended and all(len(e) <= 11 for e in ended)  # SMAX: max_steps + 1 steps
            for episode in episodes:  # every sampled action was legal under its mask
                for agent_episode in episode.agent_episodes.values():
                    masks = agent_episode.get_observations()["action_mask"][:-1]
                    for mask, action in zip(masks, agent_episode.get_actions(), strict=True):
                        assert mask[int(action)] == 1
        finally:
            algorithm.stop()


@pytest.mark.parametrize("name", ["mappo", "qmix"])
def test_trains_two_iterations_on_3m(ray_session, tmp_path, name):
    settings = {"train_batch_size": 400, "minibatch_size": 200, "num_epochs": 1}
    result = algos.get(name, **(settings if name == "mappo" else {})).fit(
        make_env("smax:3m"), stop={"training_iteration": 2}, local_dir=tmp_path
    )
    assert result.final["training_iteration"] == 2
    assert math.isfinite(result.final["episode_return_mean"])
