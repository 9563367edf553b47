"""The off-policy fast path of ``sac_roer`` / ``isac_roer`` (``fast_replay``): episode
chunks become the right transitions, K minibatches in one learner call give the weights
of K single updates (targets softened every step), priorities return to the rows they
belong to, the store survives a checkpoint, and bad settings name their field."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from marllib_ext import algos, make_env
from marllib_ext.algos.roer.fast_replay import learner_order, transitions_by_module
from marllib_ext.algos.roer.learner import REPLAY_INDEX
from marllib_ext.errors import ConfigError
from marllib_ext.rllib_compat import local_learner

TINY = {
    "hiddens": [16, 16],
    "train_batch_size": 16,
    "num_steps_sampled_before_learning_starts": 64,
    "rollout_fragment_length": 8,
}


def test_learner_order_gives_each_learner_its_share_of_every_minibatch():
    # K = 2 minibatches of B = 4 rows over N = 2 learners: rows 0-3 and 4-7.
    np.testing.assert_array_equal(learner_order(2, 4, 2), [0, 1, 4, 5, 2, 3, 6, 7])
    np.testing.assert_array_equal(learner_order(3, 2, 1), np.arange(6))


def test_single_agent_chunks_become_transitions():
    truncated = SingleAgentEpisode(
        observations=[np.array([float(i)]) for i in range(4)],
        actions=[np.array([0.1 * i]) for i in range(3)],
        rewards=[1.0, 2.0, 3.0],
        truncated=True,
        len_lookback_buffer=0,
    )
    terminated = SingleAgentEpisode(
        observations=[np.array([10.0]), np.array([11.0])],
        actions=[np.array([0.5])],
        rewards=[-1.0],
        terminated=True,
        len_lookback_buffer=0,
    )
    columns = transitions_by_module([truncated, terminated])["default_policy"]
    np.testing.assert_array_equal(columns[Columns.OBS][:, 0], [0, 1, 2, 10])
    np.testing.assert_array_equal(columns[Columns.NEXT_OBS][:, 0], [1, 2, 3, 11])
    np.testing.assert_array_equal(columns[Columns.REWARDS], [1, 2, 3, -1])
    # Only a terminated last step stops the bootstrap; a truncated one keeps it.
    np.testing.assert_array_equal(columns[Columns.TERMINATEDS], [0, 0, 0, 1])
    np.testing.assert_allclose(columns[Columns.ACTIONS][:, 0], [0, 0.1, 0.2, 0.5])


def test_multi_agent_chunks_become_each_modules_transitions():
    episode = MultiAgentEpisode(agent_module_ids={"a": "m_a", "b": "m_b"})
    episode.add_env_reset(observations={"a": np.array([0.0])}, infos={"a": {}})
    episode.add_env_step(  # b arrives after the first step
        observations={"a": np.array([1.0]), "b": np.array([5.0])},
        actions={"a": 0},
        rewards={"a": 1.0},
        infos={"a": {}, "b": {}},
    )
    episode.add_env_step(
        observations={"a": np.array([2.0]), "b": np.array([6.0])},
        actions={"a": 1, "b": 2},
        rewards={"a": 2.0, "b": 3.0},
        infos={"a": {}, "b": {}},
        terminateds={"b": True},
    )
    by_module = transitions_by_module([episode])
    np.testing.assert_array_equal(by_module["m_a"][Columns.OBS][:, 0], [0, 1])
    np.testing.assert_array_equal(by_module["m_a"][Columns.NEXT_OBS][:, 0], [1, 2])
    np.testing.assert_array_equal(by_module["m_a"][Columns.TERMINATEDS], [0, 0])
    np.testing.assert_array_equal(by_module["m_b"][Columns.OBS][:, 0], [5])
    np.testing.assert_array_equal(by_module["m_b"][Columns.NEXT_OBS][:, 0], [6])
    np.testing.assert_array_equal(by_module["m_b"][Columns.REWARDS], [3])
    np.testing.assert_array_equal(by_module["m_b"][Columns.TERMINATEDS], [1])


def module_weights(learner):
    module = learner.module["default_policy"]
    weights = {k: v.detach().clone() for k, v in module.state_dict().items()}
    weights["log_alpha"] = learner.curr_log_alpha["default_policy"].detach().clone()
    return weights


def test_k_minibatches_in_one_call_give_the_weights_of_k_single_updates(ray_session):
    """The fast learner's K-minibatch update (fused backward, per-step targets, fused
    Adam) against RLlib's learner taking the same K minibatches one call each (one
    target update per call): the same weights, targets included."""
    env = gym.make("Pendulum-v1")
    fast = algos.sac_roer(per_type="uniform", **TINY).rllib_config("Pendulum-v1", seed=0)
    rllib = algos.sac_roer(per_type="uniform", fast_replay=False, **TINY).rllib_config(
        "Pendulum-v1", seed=0
    )
    learners = []
    for config in (fast, rllib):
        learner = config.build_learner(env=env)
        learner.build()
        learners.append(learner)
    learners[1].set_state(copy.deepcopy(learners[0].get_state()))
    rng = np.random.default_rng(0)
    k, b = 3, 16
    columns = {
        Columns.OBS: rng.normal(size=(k * b, 3)).astype(np.float32),
        Columns.NEXT_OBS: rng.normal(size=(k * b, 3)).astype(np.float32),
        Columns.ACTIONS: rng.uniform(-2, 2, size=(k * b, 1)).astype(np.float32),
        Columns.REWARDS: rng.normal(size=k * b).astype(np.float32),
        Columns.TERMINATEDS: (rng.random(k * b) < 0.2).astype(np.float32),
        "weights": np.ones(k * b, np.float32),
        "n_step": np.ones(k * b, np.int64),
    }
    timesteps = {"num_env_steps_sampled_lifetime": 1000}
    torch.manual_seed(0)
    learners[0].update(
        batch=MultiAgentBatch(
            {"default_policy": SampleBatch({**columns, REPLAY_INDEX: np.arange(k * b)})}, k * b
        ),
        minibatch_size=b,
        num_epochs=1,
        shuffle_batch_per_epoch=False,
        timesteps=timesteps,
    )
    torch.manual_seed(0)
    for step in range(k):
        rows = {name: value[step * b : (step + 1) * b] for name, value in columns.items()}
        learners[1].update(
            batch=MultiAgentBatch({"default_policy": SampleBatch(rows)}, b), timesteps=timesteps
        )
    got, want = module_weights(learners[0]), module_weights(learners[1])
    assert got.keys() == want.keys()
    assert any("target" in name for name in got)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)


def test_priorities_return_to_the_rows_they_were_computed_for(ray_session):
    config = algos.sac_roer(per_type="JS", **TINY).rllib_config("Pendulum-v1", seed=0)
    algorithm = config.build_algo()
    try:
        for _ in range(12):  # past the learning start
            algorithm.training_step()
        replay = algorithm.fast_replay
        store = replay.stores["default_policy"]
        learner = local_learner(algorithm)
        batch = replay.batch(2)
        algorithm.learner_group.update(
            batch=batch, minibatch_size=16, num_epochs=1, shuffle_batch_per_epoch=False,
            timesteps={"num_env_steps_sampled_lifetime": 1000},
        )  # fmt: skip
        (indices, priorities) = learner.take_replay_feedback()["default_policy"]
        np.testing.assert_array_equal(indices, batch.policy_batches["default_policy"][REPLAY_INDEX])
        before = store.priority[indices].copy()
        store.update_priorities(indices, priorities)
        last = {index: p for index, p in zip(indices, priorities, strict=True)}
        want = 0.5 * before + 0.5 * np.array([last[i] for i in indices])  # per_beta 0.5
        np.testing.assert_allclose(store.priority[indices], want, rtol=1e-6)
        assert np.std(store.priority[: len(store)]) > 0  # the priorities spread
        result = algorithm.train()
        assert result["fast_replay"]["updates"] > 0
        assert result["learners"]["default_policy"]["priority_mean"] == pytest.approx(1, abs=1e-4)
    finally:
        algorithm.stop()


def test_store_and_priorities_survive_a_checkpoint(ray_session, tmp_path):
    config = algos.sac_roer(per_type="JS", **TINY).rllib_config("Pendulum-v1", seed=0)
    algorithm = config.build_algo()
    try:
        algorithm.train()
        store = algorithm.fast_replay.stores["default_policy"]
        saved = (len(store), store.priority[: len(store)].copy(), algorithm.fast_replay.updates)
        path = algorithm.save_to_path(tmp_path / "ckpt")
    finally:
        algorithm.stop()
    restored = config.build_algo()
    try:
        restored.restore_from_path(path)
        store = restored.fast_replay.stores["default_policy"]
        assert len(store) == saved[0] and restored.fast_replay.updates == saved[2]
        np.testing.assert_array_equal(store.priority[: len(store)], saved[1])
        restored.train()
    finally:
        restored.stop()


def test_a_policy_snapshot_leaves_the_store_out(ray_session, tmp_path):
    from marllib_ext.rllib_compat.checkpoints import save_policy_snapshot

    config = algos.sac_roer(per_type="JS", **TINY).rllib_config("Pendulum-v1", seed=0)
    algorithm = config.build_algo()
    try:
        algorithm.train()
        assert len(algorithm.fast_replay.stores["default_policy"]) > 0
        save_policy_snapshot(algorithm, tmp_path / "snapshot")
        assert "fast_replay" in algorithm.get_state()  # a full state still holds it
    finally:
        algorithm.stop()
    restored = config.build_algo()
    try:
        restored.restore_from_path(tmp_path / "snapshot")
        assert sum(len(store) for store in restored.fast_replay.stores.values()) == 0
    finally:
        restored.stop()


def test_isac_roer_fast_path_trains_one_store_per_module(ray_session):
    env = make_env("mpe:simple_spread", continuous_actions=True)
    config = algos.isac_roer(per_type="JS", **TINY).rllib_config(
        env, share_policy="individual", seed=0
    )
    algorithm = config.build_algo()
    try:
        for _ in range(2):
            result = algorithm.train()
        assert sorted(algorithm.fast_replay.stores) == sorted(env.layout.agents)
        assert result["fast_replay"]["updates"] > 0
        # JS priorities move draws away from uniform; the spread is in the progress.
        assert 0.0 < result["fast_replay"]["sampling_total_variation"] < 1.0
        assert 0.0 < result["fast_replay"]["sampling_effective_fraction"] < 1.0
    finally:
        algorithm.stop()


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"training_intensity": 2.0}, "training_intensity"),
        ({"n_step": 3}, "n_step"),
        ({"updates_per_env_step": 0.0}, "updates_per_env_step"),
    ],
)
def test_settings_the_fast_path_would_ignore_name_their_field(overrides, field):
    with pytest.raises(ConfigError, match=field):
        algos.sac_roer(**overrides).settings("Pendulum-v1")


def test_a_store_larger_than_memory_is_refused_with_the_bytes(ray_session):
    config = algos.sac_roer(buffer_capacity=10**12, **TINY).rllib_config("Pendulum-v1", seed=0)
    algorithm = config.build_algo()
    try:
        with pytest.raises(ConfigError, match="buffer_capacity=1000000000000.*GiB"):
            algorithm.train()
    finally:
        algorithm.stop()
