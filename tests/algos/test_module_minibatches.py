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
from marllib_ext.ops.minibatches import (
    cyclic_minibatch_rows,
    equal_pass_minibatch_sizes,
    minibatch_steps,
)
from marllib_ext.rllib_compat import local_learner


def two_module_batch(actor_rows=12, critic_rows=4):
    return MultiAgentBatch(
        {
            "actor": SampleBatch({"row": np.arange(actor_rows)}),
            "critic": SampleBatch({"row": np.arange(critic_rows)}),
        },
        env_steps=critic_rows,
    )


def rows_seen(minibatches):
    """Per module, how often each row was seen, and each step's minibatch sizes;
    ``minibatches``: RLlib's ``MultiAgentBatch`` steps or ``{module: row indices}``."""
    seen = {"actor": collections.Counter(), "critic": collections.Counter()}
    sizes = []
    for minibatch in minibatches:
        minibatch = getattr(minibatch, "policy_batches", minibatch)
        sizes.append({m: len(b) for m, b in minibatch.items()})
        for module_id, rows in minibatch.items():
            rows = rows["row"] if isinstance(rows, SampleBatch) else rows
            seen[module_id].update(np.asarray(rows).tolist())
    return seen, sizes


def equal_passes(num_epochs=2, minibatch_size=6, shuffle=False, num_total_minibatches=0):
    units = {"actor": 12, "critic": 4}
    return cyclic_minibatch_rows(
        units,
        equal_pass_minibatch_sizes(units, minibatch_size),
        num_epochs=num_epochs,
        num_total_minibatches=num_total_minibatches
        or minibatch_steps(num_epochs, 12, minibatch_size),
        shuffle=shuffle,
    )


def test_cyclic_rows_literal():
    """Five rows, two at a time, two passes: the third step wraps around."""
    steps = cyclic_minibatch_rows({"m": 5}, {"m": 2}, num_epochs=2, shuffle=False)
    assert [step["m"].tolist() for step in steps] == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]


@pytest.mark.parametrize(
    "units, sizes, num_epochs, num_total",
    [
        ({"actor": 12, "critic": 4}, {"actor": 6, "critic": 6}, 2, 0),  # same_rows
        ({"actor": 13, "critic": 5}, {"actor": 4, "critic": 4}, 3, 0),
        ({"actor": 12, "critic": 4}, {"actor": 5, "critic": 5}, 2, 7),  # data-parallel
        ({"a": 10}, {"a": 10}, 3, 0),  # whole batch per epoch
        ({"a": 7, "b": 3}, {"a": 16, "b": 16}, 2, 0),  # minibatch beyond a whole pass
    ],
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_cyclic_rows_are_rllibs_iterator_on_indices(units, sizes, num_epochs, num_total, shuffle):
    """The slow reference is RLlib's own ``MiniBatchCyclicIterator`` slicing, shuffling
    and concatenating the batch: from the same global numpy seed it yields the same rows
    step for step, and leaves each batch in the order the returned ``orders`` give."""
    batch = MultiAgentBatch(
        {m: SampleBatch({"row": np.arange(n)}) for m, n in units.items()},
        env_steps=max(units.values()),
    )
    size = next(iter(sizes.values()))
    np.random.seed(3)
    expected = [
        {m: rows["row"].tolist() for m, rows in minibatch.policy_batches.items()}
        for minibatch in MiniBatchCyclicIterator(
            batch,
            num_epochs=num_epochs,
            minibatch_size=size,
            shuffle_batch_per_epoch=shuffle,
            num_total_minibatches=num_total,
        )
    ]
    np.random.seed(3)
    orders = {}
    got = [
        {m: rows.tolist() for m, rows in step.items()}
        for step in cyclic_minibatch_rows(
            units,
            sizes,
            num_epochs=num_epochs,
            num_total_minibatches=num_total,
            shuffle=shuffle,
            orders=orders,
        )
    ]
    assert got == expected
    for module_id, rows in batch.policy_batches.items():
        assert rows["row"].tolist() == orders[module_id].tolist()


def test_a_module_without_rows_is_refused_by_name():
    with pytest.raises(ValueError, match="'critic'"):
        next(cyclic_minibatch_rows({"critic": 0}, {"critic": 1}, num_epochs=1, shuffle=False))


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
    seen, sizes = rows_seen(equal_passes(shuffle=shuffle))
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
    _, sizes = rows_seen(equal_passes(shuffle=True, num_total_minibatches=5))
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
