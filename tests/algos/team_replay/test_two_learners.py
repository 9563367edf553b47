"""Team replay on two data-parallel learners: each takes its half of a replayed batch,
their gradients are averaged, and they end where one learner on the whole batch ends.
The collectives themselves on a two-process gloo group, without Ray."""

import numpy as np
import torch
import torch.multiprocessing as mp
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from marllib_ext import algos
from marllib_ext.rllib_compat import local_learner, priorities_from_learner
from marllib_ext.rllib_compat.data_parallel import average_over_learners, this_learners_rows
from tests.data_parallel import learner_weights, module_weights

SETTINGS = {
    "batch_episode": 4,
    "learning_starts": 2,
    "num_env_runners": 0,
    "per_type": "PER",
    "reward_standardize": True,
}


def build(num_learners):
    config = algos.vdn(num_learners=num_learners, **SETTINGS).rllib_config(
        "toy:coordination", seed=0
    )
    return config.build_algo()


def test_two_learners_step_as_one_learner_on_the_whole_batch(ray_session):
    """``vdn`` (a deterministic loss, prioritized replay, rewards standardized over the
    batch): one update of two learners restored from one learner's state (weights and
    RMSprop's moments) on a 64-transition batch."""
    one, two = build(0), build(2)
    try:
        one.train()  # fills the store and moves the weights and RMSprop's moments
        two.learner_group.set_state(one.learner_group.get_state())
        sampled = one.store.sample_transitions(64)
        rows = SampleBatch(sampled.columns())
        batch = MultiAgentBatch({mid: rows for mid in one.team_modules}, env_steps=64)
        (single,) = one.learner_group.update(batch=batch)
        pair = two.learner_group.update(batches=[batch, batch])

        team = one.team_modules[0]
        shares = [priorities_from_learner(result, team) for result in pair]
        assert [share.shape[0] for share in shares] == [32, 32]
        np.testing.assert_allclose(
            np.concatenate(shares), priorities_from_learner(single, team), rtol=1e-5
        )
        expected = module_weights(local_learner(one))
        for weights in learner_weights(two):
            for module_id, params in expected.items():
                for name, value in params.items():
                    actual = weights[module_id][name]
                    np.testing.assert_allclose(
                        actual, value, rtol=1e-4, atol=1e-6, err_msg=f"{module_id} {name}"
                    )
    finally:
        one.stop()
        two.stop()


def _collectives(rank, init_file, results):
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=2
    )
    try:
        grads = [torch.full((2, 3), float(rank + 1)), torch.tensor([10.0 * rank])]
        average_over_learners(grads)
        results[rank] = (
            [g.tolist() for g in grads],
            [this_learners_rows(n) for n in (64, 7, 1)],
        )
    finally:
        torch.distributed.destroy_process_group()


def test_gradients_are_averaged_and_rows_split_as_rllib_shards(tmp_path):
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_collectives, args=(str(tmp_path / "init"), results), nprocs=2)
        results = dict(results)
    for rank in (0, 1):
        grads, rows = results[rank]
        assert grads == [[[1.5] * 3] * 2, [5.0]]
        expected = [(0, 32), (0, 4), (0, 1)] if rank == 0 else [(32, 64), (4, 7), (1, 1)]
        assert [(r.start, r.stop) for r in rows] == expected
    # Without a process group: every row, gradients untouched.
    assert this_learners_rows(5) == slice(0, 5)
    grads = [torch.ones(2)]
    average_over_learners(grads)
    assert grads[0].tolist() == [1.0, 1.0]
