"""RLlib internals of minibatching: each module's minibatch as the same share of its
own batch (``module_minibatches: equal_passes``)."""

from __future__ import annotations

from collections.abc import Iterator

from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import Learner
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator

from marllib_ext.ops.minibatches import equal_pass_minibatch_sizes, minibatch_steps


def equal_pass_minibatches(
    batch: MultiAgentBatch,
    *,
    num_epochs: int,
    minibatch_size: int,
    shuffle: bool,
    num_total_minibatches: int = 0,
) -> Iterator[MultiAgentBatch]:
    """``minibatch_steps(num_epochs, largest_rows, minibatch_size)`` minibatches (or
    ``num_total_minibatches`` when > 0, as data-parallel learners set it), each holding
    every module's next ``equal_pass_minibatch_sizes`` rows; so every module takes
    ``num_epochs`` passes over its batch.

    Relies on: RLlib's ``MiniBatchCyclicIterator`` over one module's batch cycles
    through it (shuffling it at each pass when asked) and, with ``num_total_minibatches
    > 0``, yields exactly that many minibatches."""
    rows = {module_id: len(rows) for module_id, rows in batch.policy_batches.items()}
    sizes = equal_pass_minibatch_sizes(rows, minibatch_size)
    steps = num_total_minibatches or minibatch_steps(num_epochs, max(rows.values()), minibatch_size)
    env_steps = batch.env_steps()
    iterators = {
        module_id: iter(
            MiniBatchCyclicIterator(
                MultiAgentBatch({module_id: module_batch}, env_steps),
                num_epochs=num_epochs,
                minibatch_size=sizes[module_id],
                shuffle_batch_per_epoch=shuffle,
                num_total_minibatches=steps,
            )
        )
        for module_id, module_batch in batch.policy_batches.items()
    }
    for _ in range(steps):
        yield MultiAgentBatch(
            {
                module_id: next(minibatches).policy_batches[module_id]
                for module_id, minibatches in iterators.items()
            },
            env_steps,
        )


class EqualPassesMinibatches:
    """Learner mixin (list it before the RLlib learner): ``Learner.update(...,
    equal_passes=True)`` with a ``minibatch_size`` steps every module on the same share
    of its own batch (``equal_pass_minibatches``). Without it RLlib gives every module
    ``minibatch_size`` rows until the largest batch has had ``num_epochs`` passes, so a
    smaller batch (a joint critic's one row per env step) takes more passes.

    Relies on: ``Learner.update`` hands its extra keyword arguments to
    ``_create_iterator_if_necessary``, which builds the batch
    (``_make_batch_if_necessary``), drops the modules ``should_module_be_updated``
    refuses, marks the batch for slicing (``_set_slicing_by_batch_id``) and returns what
    the update iterates."""

    @override(Learner)
    def _create_iterator_if_necessary(
        self,
        *,
        training_data,
        num_total_minibatches: int = 0,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        shuffle_batch_per_epoch: bool = False,
        equal_passes: bool = False,
        **kwargs,
    ):
        if not equal_passes or not minibatch_size or training_data.data_iterators:
            return super()._create_iterator_if_necessary(
                training_data=training_data,
                num_total_minibatches=num_total_minibatches,
                num_epochs=num_epochs,
                minibatch_size=minibatch_size,
                shuffle_batch_per_epoch=shuffle_batch_per_epoch,
                **kwargs,
            )
        batch = self._make_batch_if_necessary(training_data=training_data)
        for module_id in list(batch.policy_batches):
            if not self.should_module_be_updated(module_id, batch):
                del batch.policy_batches[module_id]
        if not batch.policy_batches:
            return {}
        batch = self._set_slicing_by_batch_id(batch, value=True)
        return equal_pass_minibatches(
            batch,
            num_epochs=num_epochs,
            minibatch_size=minibatch_size,
            shuffle=shuffle_batch_per_epoch and num_epochs > 1,
            num_total_minibatches=num_total_minibatches,
        )


def module_batch(columns: dict) -> SampleBatch:
    """One module's columns as RLlib's batch; a recurrent module's ``[N, L, ...]``
    sequences (``Columns.SEQ_LENS``) as RLlib's learner connectors leave them, so that
    minibatches slice and shuffle whole sequences.

    Relies on: ``SampleBatch(..., _zero_padded=True, _max_seq_len=L)`` marks columns
    that already carry the time rank; its length is then ``sum(seq_lens)`` and
    ``shuffle`` permutes sequences (RLlib's own recurrent PPO batches)."""
    seq_lens = columns.get(Columns.SEQ_LENS)
    if seq_lens is None:
        return SampleBatch(columns)
    return SampleBatch(
        columns, _zero_padded=True, _max_seq_len=int(columns[Columns.LOSS_MASK].shape[1])
    )
