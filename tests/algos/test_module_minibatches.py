"""``module_minibatches``: RLlib steps every module with ``minibatch_size`` rows until
the largest batch has had ``num_epochs`` passes (``same_rows``, the default), so a joint
critic's smaller batch takes more passes; ``equal_passes`` gives each module the same
share of its own batch, so every module takes ``num_epochs`` passes."""

import collections

import numpy as np
import pytest
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator

from marllib_ext import algos
from marllib_ext.errors import ConfigError
from marllib_ext.ops.minibatches import equal_pass_minibatch_sizes, minibatch_steps
from marllib_ext.rllib_compat import local_learner
from marllib_ext.rllib_compat.minibatches import equal_pass_minibatches


def two_module_batch(actor_rows=12, critic_rows=4):
    return MultiAgentBatch(
        {
            "actor": SampleBatch({"row": np.arange(actor_rows)}),
            "critic": SampleBatch({"row": np.arange(critic_rows)}),
        },
        env_steps=critic_rows,
    )


def rows_seen(minibatches):
    seen = {"actor": collections.Counter(), "critic": collections.Counter()}
    sizes = []
    for minibatch in minibatches:
        sizes.append({m: len(b) for m, b in minibatch.policy_batches.items()})
        for module_id, rows in minibatch.policy_batches.items():
            seen[module_id].update(rows["row"].tolist())
    return seen, sizes


def test_minibatch_sizes_are_the_same_share_of_each_module_batch():
    assert equal_pass_minibatch_sizes({"actor": 12, "critic": 4}, 6) == {"actor": 6, "critic": 2}
    assert equal_pass_minibatch_sizes({"actor": 13200, "critic": 4400}, 3000) == {
        "actor": 3000,
        "critic": 1000,
    }
    assert equal_pass_minibatch_sizes({"actor": 100, "critic": 1}, 10) == {
        "actor": 10,
        "critic": 1,  # never empty
    }


def test_minibatch_steps_give_the_batch_num_epochs_passes():
    assert minibatch_steps(5, 12000, 3000) == 20
    assert minibatch_steps(5, 13200, 3000) == 22  # 10-step chunks' bootstrap rows
    assert minibatch_steps(2, 12, 6) == 4
    assert minibatch_steps(3, 100, None) == 3  # the whole batch, once per epoch
    for epochs, rows, size in [(1, 7, 3), (4, 10, 10), (5, 101, 20)]:
        steps = 0
        while steps * size < epochs * rows:  # the obvious loop
            steps += 1
        assert minibatch_steps(epochs, rows, size) == steps


@pytest.mark.parametrize("shuffle", [False, True])
def test_equal_passes_show_every_row_of_every_module_num_epochs_times(shuffle):
    seen, sizes = rows_seen(
        equal_pass_minibatches(two_module_batch(), num_epochs=2, minibatch_size=6, shuffle=shuffle)
    )
    assert sizes == [{"actor": 6, "critic": 2}] * 4
    assert seen["actor"] == collections.Counter({row: 2 for row in range(12)})
    assert seen["critic"] == collections.Counter({row: 2 for row in range(4)})


def test_rllibs_own_iterator_gives_the_smaller_batch_more_passes():
    """The default (same_rows): the critic's 4 rows are stepped 6 at a time for as long
    as the actor's 12 need, 3 times the passes."""
    iterator = MiniBatchCyclicIterator(
        two_module_batch(), num_epochs=2, minibatch_size=6, shuffle_batch_per_epoch=False
    )
    seen, sizes = rows_seen(iterator)
    assert sizes == [{"actor": 6, "critic": 6}] * 4
    assert sum(seen["critic"].values()) == 24  # 6 passes over 4 rows


def test_data_parallel_learners_take_the_given_number_of_minibatches():
    _, sizes = rows_seen(
        equal_pass_minibatches(
            two_module_batch(),
            num_epochs=2,
            minibatch_size=6,
            shuffle=True,
            num_total_minibatches=5,
        )
    )
    assert len(sizes) == 5


def test_unknown_mode_is_refused_with_the_field():
    with pytest.raises(ConfigError, match="module_minibatches"):
        algos.mappo(module_minibatches="frames").settings("toy:coordination")


@pytest.mark.parametrize("mode", ["same_rows", "equal_passes"])
def test_mappo_critic_minibatches_follow_the_mode(ray_session, mode):
    algorithm = (
        algos.mappo(
            hyperparam_source="toy",
            num_env_runners=0,
            train_batch_size=200,
            minibatch_size=100,
            num_epochs=2,
            module_minibatches=mode,
        )
        .rllib_config("toy:coordination", seed=0)
        .build_algo()
    )
    try:
        learner = local_learner(algorithm)
        sizes = []
        update = type(learner)._update

        def counting(self, batch, **kwargs):
            sizes.append({module_id: len(rows) for module_id, rows in batch.items()})
            return update(self, batch, **kwargs)

        type(learner)._update = counting
        try:
            algorithm.train()
        finally:
            type(learner)._update = update
        actor_rows = {s["shared"] for s in sizes}
        critic_rows = {s["joint_critic"] for s in sizes}
        assert actor_rows == {100}
        # toy:coordination has 2 agents: the critic batch is half the actors'.
        assert critic_rows == ({100} if mode == "same_rows" else {50})
    finally:
        algorithm.stop()


@pytest.mark.slow  # data-parallel learners (a slow-tier topic)
def test_equal_passes_with_two_learners_keeps_them_identical(ray_session):
    """Both learners take the same number of minibatches (DDP would hang otherwise) and
    end with the same weights."""
    from tests.data_parallel import assert_learners_identical, two_learner_config

    algorithm = two_learner_config("mappo", module_minibatches="equal_passes").build_algo()
    try:
        algorithm.train()
        assert_learners_identical(algorithm)
    finally:
        algorithm.stop()
