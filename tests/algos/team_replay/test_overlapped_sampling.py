"""``overlap_sampling``: the remote runners sample while the learner updates; no episode is
lost or stored twice, the runners get the learner's weights, and the setting is refused
without remote runners."""

import numpy as np
import pytest

from marllib_ext import algos, make_env
from marllib_ext.algos.team_replay import PROGRESS_KEY
from marllib_ext.envs import register_env
from marllib_ext.errors import ConfigError
from marllib_ext.rollout.overlapped import OverlappedSampler
from tests.helpers import EPISODE_LENGTH, CrashOnceEnv

register_env("test:overlap_crash_once", CrashOnceEnv, state_source="env")


def overlapped_qmix(**overrides):
    settings = dict(
        num_env_runners=1,
        overlap_sampling=True,
        num_envs_per_env_runner=2,
        batch_episode=4,
        buffer_size=1000,
        whole_episodes=True,
    )
    return algos.qmix(**{**settings, **overrides}).rllib_config("test:counter", seed=0)


def test_every_sampled_episode_is_stored_once_and_a_request_stays_in_flight(ray_session):
    algorithm = overlapped_qmix().build_algo()
    try:
        assert isinstance(algorithm.overlapped, OverlappedSampler)
        updates = 0
        for _ in range(6):
            result = algorithm.train()
            assert algorithm.overlapped.in_flight() == 1  # the next sample runs meanwhile
            updates += result["team_replay"]["updates"]
        stored = len(algorithm.store)
        assert stored == algorithm.episodes_sampled >= 6 * 2
        assert updates > 0
        # CounterEnv numbers its episodes: each stored episode is a different one.
        uids = algorithm.store.arrays["obs"][:stored, 0, 0, 0]
        assert len(np.unique(uids)) == stored
        steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
        assert steps == stored * EPISODE_LENGTH == algorithm.store.num_transitions
    finally:
        algorithm.stop()


def test_runners_get_the_learners_weights(ray_session):
    algorithm = overlapped_qmix(learning_starts=2).build_algo()
    try:
        policy = algorithm.agent_policies[0]
        initial = algorithm.learner_group.get_weights([policy])[policy]
        for _ in range(3):
            algorithm.train()
            learned = algorithm.learner_group.get_weights([policy])[policy]
            # Queued behind the in-flight sample and this iteration's weight sync.
            (acting,) = algorithm.env_runner_group.foreach_env_runner(
                lambda runner, policy=policy: runner.module[policy].get_state(inference_only=True),
                local_env_runner=False,
            )
            for key, value in acting.items():
                assert np.array_equal(np.asarray(value), np.asarray(learned[key])), key
        assert any(not np.array_equal(initial[k], learned[k]) for k in initial)  # it learned
    finally:
        algorithm.stop()


def test_no_blocking_runner_sync_and_exploration_reads_the_env_steps(ray_session):
    """RLlib's end-of-iteration sync would wait for the sample in flight; the requests
    carry the env-step count (epsilon's clock) instead."""
    algorithm = overlapped_qmix().build_algo()
    group = algorithm.env_runner_group
    blocking_syncs = []
    sync = group.sync_env_runner_states
    group.sync_env_runner_states = lambda **kwargs: blocking_syncs.append(kwargs) or sync(**kwargs)
    try:
        for _ in range(4):
            result = algorithm.train()
            steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
            # Read after the request in flight, which started at this count.
            (clock,) = group.foreach_env_runner(
                lambda runner: runner.num_env_steps_sampled_lifetime, local_env_runner=False
            )
            assert clock == steps > 0
        assert blocking_syncs == []
    finally:
        algorithm.stop()


def test_the_random_warmup_goes_with_each_request(ray_session):
    """Each request acts at random while the env steps sampled before it are below
    ``random_warmup_steps``: here the first one only."""
    algorithm = overlapped_qmix(random_warmup_steps=1).build_algo()
    try:
        random_episodes = [
            algorithm.train()[PROGRESS_KEY]["random_action_episodes"] for _ in range(3)
        ]
        assert random_episodes == [2, 0, 0]
    finally:
        algorithm.stop()


def test_overlap_without_remote_runners_is_refused_by_name():
    with pytest.raises(ConfigError, match="overlap_sampling"):
        algos.qmix(num_env_runners=0, overlap_sampling=True).rllib_config("test:counter")


def test_a_crashed_runner_is_replaced_and_sampling_goes_on(ray_session, tmp_path):
    marker = tmp_path / "crashed"
    env = make_env("test:overlap_crash_once", marker=str(marker), crash_at=40)
    result = algos.qmix(
        num_env_runners=1, overlap_sampling=True, batch_episode=4, learning_starts=4
    ).fit(
        env,
        stop={"timesteps_total": 600, "training_iteration": 60},
        local_dir=tmp_path,
        checkpoint_end=False,
    )
    assert marker.exists()  # the runner really died, with a request in flight
    assert result.final["timesteps_total"] >= 600
    assert result.final["training_iteration"] < 60
