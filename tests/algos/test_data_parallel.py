"""Data-parallel learners (``num_learners=2``, torch DDP on CPU): every algorithm trains,
the learners stay identical (weights, EFX budgets, safe multipliers), an iteration
samples ``train_batch_size`` env steps, and RLlib's time-sliced shards give the same
team advantages as one learner fed the same slices."""

import copy

import numpy as np
import pytest
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.rllib.utils.minibatch_utils import ShardEpisodesIterator

from marllib_ext import algos, make_env
from marllib_ext.algos.registry import ALGORITHMS
from marllib_ext.errors import ConfigError
from marllib_ext.rllib_compat import local_learner
from tests.data_parallel import (
    BATCH,
    assert_learners_identical,
    two_learner_algorithm,
    two_learner_config,
)
from tests.helpers import CapturesTrainBatch

# One algorithm per family: IL, CC, VD, HAPPO, COMA here; EFX (efx_mappo) and safe
# (mappo_lag) in the 3-iteration state tests below.
FAMILIES = ("ippo", "mappo", "vdppo", "happo", "coma")
# The default run keeps the CC and COMA learners; the others are the slow tier's.
DEFAULT_FAMILIES = ("mappo",)  # the others, coma included, in the slow tier
SECOND_FAMILIES = tuple(f for f in FAMILIES if f not in DEFAULT_FAMILIES)
STATE_TESTED = ("efx_mappo", "mappo_lag")


def train_and_check(name, iterations=1):
    algorithm = two_learner_algorithm(name)
    try:
        for _ in range(iterations):
            result = algorithm.train()
        if not ALGORITHMS[name].capabilities.off_policy:
            # train_batch_size is the iteration's env steps, not one learner's share.
            assert result["env_runners"]["num_env_steps_sampled"] == BATCH
        assert_learners_identical(algorithm)
        return algorithm, result
    except BaseException:
        algorithm.stop()
        raise


@pytest.mark.parametrize(
    "name", [*DEFAULT_FAMILIES, *(pytest.param(n, marks=pytest.mark.slow) for n in SECOND_FAMILIES)]
)
def test_one_algorithm_per_family_trains_with_two_learners(ray_session, name):
    algorithm, _ = train_and_check(name)
    algorithm.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    sorted(set(ALGORITHMS) - set(FAMILIES) - set(STATE_TESTED)),
)
def test_every_other_algorithm_trains_with_two_learners(ray_session, name):
    algorithm, _ = train_and_check(name)
    algorithm.stop()


def test_central_critic_trains_when_an_episode_is_sliced_across_learners(ray_session):
    """A 150-step episode in a 200-step batch is cut between the two learners; both
    slices still carry the global state the joint critic reads from the infos."""
    config = algos.mappo(
        num_learners=2,
        num_env_runners=0,
        num_envs_per_env_runner=1,
        train_batch_size=BATCH,
        minibatch_size=BATCH // 2,
        num_epochs=1,
    ).rllib_config(make_env("mpe:simple_spread", max_cycles=150), seed=0)
    algorithm = config.build_algo()
    try:
        for _ in range(2):
            result = algorithm.train()
        assert result["env_runners"]["num_env_steps_sampled"] == BATCH
        assert_learners_identical(algorithm)
    finally:
        algorithm.stop()


def test_learners_restored_from_one_state_stay_identical(ray_session):
    """A restore gives each learner its own optimizer moments: learners that shared the
    restored Adam buffers stepped them in turn and parted after one update."""
    algorithm = two_learner_algorithm("mappo")
    try:
        algorithm.train()
        algorithm.learner_group.set_state(algorithm.learner_group.get_state())
        algorithm.train()
        assert_learners_identical(algorithm)
    finally:
        algorithm.stop()


@pytest.mark.slow  # two learners per team critic; the one-team case runs by default
@pytest.mark.parametrize("name", ["mappo", "efx_vdppo"])
def test_multi_team_env_trains_with_two_learners(ray_session, name):
    """One joint critic per team (good agents vs adversary), each synced."""
    config = algos.get(
        name,
        num_learners=2,
        num_env_runners=0,
        num_envs_per_env_runner=8,  # 200 steps split evenly over the envs
        train_batch_size=BATCH,
        minibatch_size=BATCH // 2,
    ).rllib_config("mpe:simple_adversary", share_policy="group", seed=0)
    algorithm = config.build_algo()
    try:
        result = algorithm.train()
        assert result["env_runners"]["num_env_steps_sampled"] == BATCH
        (module_ids, _) = algorithm.learner_group.foreach_learner(
            lambda learner: sorted(learner.module.keys())
        )
        critics = [m for m in module_ids.get() if "critic" in m]
        assert len(critics) == 2
        assert_learners_identical(algorithm)
    finally:
        algorithm.stop()


@pytest.mark.slow  # learner state across data-parallel learners (a slow-tier topic)
def test_efx_budgets_stay_identical_across_learners(ray_session):
    algorithm, result = train_and_check("efx_mappo", iterations=3)
    try:
        budgets = [
            ref.get()
            for ref in algorithm.learner_group.foreach_learner(
                lambda learner: [c.budget for c in learner.advantage_connectors()]
            )
        ]
        assert budgets[0] == budgets[1]
        assert budgets[0] == [pytest.approx(result["efx"]["budget_z"])]
    finally:
        algorithm.stop()


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) for n in ("mappo_lag", "mappo_pid_lag")]
)
def test_safe_multipliers_stay_identical_across_learners(ray_session, name):
    algorithm, result = train_and_check(name, iterations=3)
    try:
        states = [
            ref.get()
            for ref in algorithm.learner_group.foreach_learner(
                lambda learner: {t: m.get_state() for t, m in learner.multipliers.items()}
            )
        ]
        first, second = states
        assert repr(first) == repr(second)  # floats and optimizer moments alike
        (team_state,) = first.values()
        assert team_state["multiplier"] == pytest.approx(result["safe"]["cost_multiplier"])
    finally:
        algorithm.stop()


def test_batch_sizes_must_split_evenly_over_learners():
    with pytest.raises(ConfigError, match="train_batch_size.*num_learners=3"):
        algos.mappo(num_learners=3, train_batch_size=4000).rllib_config("mpe:simple_spread")
    with pytest.raises(ConfigError, match="minibatch_size.*num_learners=3"):
        algos.mappo(num_learners=3, train_batch_size=3000, minibatch_size=1000).rllib_config(
            "mpe:simple_spread"
        )


def test_each_learner_gets_its_share_of_the_batch():
    config = algos.mappo(num_learners=4, train_batch_size=4000, minibatch_size=1000).rllib_config(
        "mpe:simple_spread"
    )
    assert config.train_batch_size_per_learner == 1000
    assert config.total_train_batch_size == 4000
    assert config.minibatch_size == 250


# ---- time slices --------------------------------------------------------------------
def sampled_episodes(algorithm, env_steps):
    """Episode chunks (RLlib's sharding slices them in time), not rollout blocks: the
    algorithm is built with ``sampler="episode_chunks"``."""
    runner = algorithm.env_runner_group.local_env_runner
    assert runner.sampling.startswith("sampling: episode chunks built from arrays")
    return runner.sample(num_timesteps=env_steps, random_actions=False)


@pytest.mark.parametrize("name", ["mappo", "efx_mappo"])
def test_two_learners_take_one_rollout_block_each(ray_session, name):
    """A runner hands one block of half its worlds per learner; RLlib's sharding gives
    each learner one whole, and the learners stay identical."""
    algorithm = two_learner_algorithm(name)
    try:
        runner = algorithm.env_runner_group.local_env_runner
        assert runner.sampling == "sampling: rollout blocks"
        blocks = runner.sample(num_timesteps=BATCH, random_actions=False)
        assert len(blocks) == 2 and len(blocks[0]) == len(blocks[1]) >= BATCH // 2
        shards = list(ShardEpisodesIterator(list(blocks), num_shards=2))
        assert [[id(block) for block in shard] for shard in shards] == [
            [id(blocks[0])],
            [id(blocks[1])],
        ]
        for _ in range(2):
            result = algorithm.train()
        assert result["learners"]["__all_modules__"]["block_batch_timer"] > 0
        assert_learners_identical(algorithm)
    finally:
        algorithm.stop()


def test_shards_never_split_one_env_step_between_learners(ray_session):
    algorithm = two_learner_algorithm("mappo", "episode_chunks")
    try:
        episodes = sampled_episodes(algorithm, 301)  # odd: the shards need a time slice
        total = sum(len(e) for e in episodes)
        shards = list(ShardEpisodesIterator(copy.deepcopy(episodes), num_shards=2))
        sliced = 0
        for shard in shards:
            for episode in shard:
                for agent_episode in episode.agent_episodes.values():
                    # Every agent holds exactly the slice's env steps, from the same start.
                    assert len(agent_episode) == len(episode)
                    assert agent_episode.t_started == episode.env_t_started
                sliced += not episode.is_done and len(episode) < 25
        assert sum(len(e) for shard in shards for e in shard) == total
        assert abs(sum(map(len, shards[0])) - sum(map(len, shards[1]))) <= 1
        assert sliced > 0
    finally:
        algorithm.stop()


@pytest.mark.parametrize(
    "name",
    [
        "mappo",
        pytest.param("vdppo", marks=pytest.mark.slow),
        pytest.param("efx_mappo", marks=pytest.mark.slow),
    ],
)
def test_two_learners_write_the_advantages_one_learner_writes_on_the_same_slices(ray_session, name):
    """The advantages and value targets each of 2 learners computes in a real update
    equal those of one local learner (same weights) fed the same time slices: a slice
    end is a rollout cut (bootstrap from V, EFX's segment ends there)."""
    # EFX with hinge: demand_push reads each row's own ACTION_LOGP, and on some rows the
    # shards rebuilt here carry other ACTIONS / ACTION_LOGP than the learner group's (same
    # OBS and ACTION_DIST_INPUTS), so it would compare different data, not the learners.
    overrides = {"efx_advantage": "hinge"} if name.startswith("efx") else {}
    config = two_learner_config(name, "episode_chunks", **overrides)
    capturing = type("CapturingLearner", (CapturesTrainBatch, config.learner_class), {})
    algorithm = config.learners(learner_class=capturing).build_algo()
    single = two_learner_config(name, num_learners=0, **overrides).build_algo()
    try:
        episodes = sampled_episodes(algorithm, 301)
        weights = algorithm.learner_group.foreach_learner(
            lambda learner: learner.module.get_state()
        )
        local = local_learner(single)
        local.module.set_state(next(iter(weights)).get())

        algorithm.learner_group.update(
            episodes=copy.deepcopy(episodes),
            timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: 0},
            num_epochs=1,
            minibatch_size=config.minibatch_size,
        )
        captured = [
            ref.get()
            for ref in algorithm.learner_group.foreach_learner(
                lambda learner: advantage_columns(learner.last_train_batch)
            )
        ]
        shards = ShardEpisodesIterator(
            copy.deepcopy(episodes),
            num_shards=2,
            len_lookback_buffer=config.episode_lookback_horizon,
        )
        for shard, got in zip(shards, captured, strict=True):
            expected = advantage_columns(local.train_batch(TrainingData(episodes=shard)))
            assert got.keys() == expected.keys()
            for module_id, columns in expected.items():
                for column, values in columns.items():
                    np.testing.assert_allclose(
                        got[module_id][column], values, rtol=1e-5, atol=1e-5, err_msg=column
                    )
    finally:
        algorithm.stop()
        single.stop()


def advantage_columns(batch):
    return {
        module_id: {
            column: rows[column].detach().cpu().numpy()
            for column in (Columns.ADVANTAGES, Columns.VALUE_TARGETS, Columns.LOSS_MASK)
            if column in rows
        }
        for module_id, rows in batch.policy_batches.items()
    }


def test_prioritized_replay_refuses_several_learners():
    with pytest.raises(ConfigError, match="num_learners"):
        algos.sac_roer(num_learners=2, per_type="JS").rllib_config("Pendulum-v1")
    # Uniform replay shards fine.
    algos.sac_roer(num_learners=2, per_type="uniform").rllib_config("Pendulum-v1")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mappo", "ippo"])
def test_recurrent_actors_train_with_two_learners(ray_session, name):
    """Each learner takes its worlds' sequences (a block splits by worlds) and both
    stay identical."""
    algorithm = two_learner_algorithm(name, use_rnn=True, max_seq_len=4)
    try:
        algorithm.train()
        assert_learners_identical(algorithm)
    finally:
        algorithm.stop()
