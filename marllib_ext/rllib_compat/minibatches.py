"""RLlib internals of minibatch SGD: an update's steps on minibatches the package
gathers itself (``update_on_minibatches``), and one module's rows as RLlib's batch."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
import tree
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import SampleBatch
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    MODULE_TRAIN_BATCH_SIZE_MEAN,
    NUM_ENV_STEPS_TRAINED,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    WEIGHTS_SEQ_NO,
)


def update_on_minibatches(
    learner,
    minibatches: Iterable[dict[str, SampleBatch]],
    *,
    env_steps: int,
    timesteps: dict | None,
    last: bool,
):
    """One update of ``learner``: a gradient step on each ``{module_id: rows}`` of
    ``minibatches``, between RLlib's before- and after-update hooks (learning-rate
    schedules); logs each module's last loss and the steps trained once, and reduces
    the learner's metrics on the ``last`` update of an iteration (returns ``None``
    otherwise). Optimizers, gradient clipping, the data-parallel all-reduce and device
    placement stay RLlib's: each step is the learner's own ``_update``.

    Relies on: ``Learner.update``'s loop body is ``_update(minibatch.policy_batches)``
    (forward, losses, gradients, ``postprocess_gradients``, ``apply_gradients``;
    ``TorchLearner`` runs it compiled where configured) followed by metrics logging,
    and it bumps ``_weights_seq_no`` once per update."""
    timesteps = timesteps or {}
    learner.before_gradient_based_update(timesteps=timesteps)
    learner._weights_seq_no += 1
    loss_per_module: dict[str, Any] = {}
    rows: dict[str, list[int]] = {}
    for minibatch in minibatches:
        _, loss_per_module, _ = learner._update(minibatch)
        for module_id, module_rows in minibatch.items():
            rows.setdefault(module_id, []).append(len(module_rows))
    for module_id, loss in loss_per_module.items():
        learner.metrics.log_value((module_id, learner.TOTAL_LOSS_KEY), loss, window=1)
    log_steps_trained(learner, rows, env_steps)
    learner.after_gradient_based_update(timesteps=timesteps)
    return learner.metrics.reduce() if last else None


def log_steps_trained(learner, rows: dict[str, list[int]], env_steps: int) -> None:
    """RLlib's steps-trained metrics of one update, logged once: per module the mean
    minibatch size and the rows trained on (``rows``: each step's minibatch size), and
    the update's ``env_steps``."""
    metrics = learner.metrics
    for module_id, sizes in rows.items():
        metrics.log_value((module_id, WEIGHTS_SEQ_NO), learner._weights_seq_no, window=1)
        metrics.log_value(
            (module_id, MODULE_TRAIN_BATCH_SIZE_MEAN), float(np.mean(sizes)), reduce="mean"
        )
        trained = int(sum(sizes))
        metrics.log_value((module_id, NUM_MODULE_STEPS_TRAINED), trained, reduce="sum")
        for key in (
            (module_id, NUM_MODULE_STEPS_TRAINED_LIFETIME),
            (ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME),
        ):
            metrics.log_value(key, trained, reduce="lifetime_sum", with_throughput=True)
        metrics.log_value(
            (ALL_MODULES, NUM_MODULE_STEPS_TRAINED), trained, reduce="sum", with_throughput=True
        )
    if rows:
        metrics.log_value(
            (ALL_MODULES, NUM_ENV_STEPS_TRAINED), env_steps, reduce="sum", with_throughput=True
        )
        metrics.log_value(
            (ALL_MODULES, NUM_ENV_STEPS_TRAINED_LIFETIME),
            env_steps,
            reduce="lifetime_sum",
            with_throughput=True,
        )


def minibatch_units(module_batch: SampleBatch) -> int:
    """What a minibatch of the module's batch is counted and shuffled in: its rows, or
    for a recurrent ``[N, L, ...]`` batch its ``N`` sequences."""
    seq_lens = module_batch.get(Columns.SEQ_LENS)
    return len(module_batch) if seq_lens is None else len(seq_lens)


def units_per_minibatch(module_batch: SampleBatch, minibatch_size: int) -> int:
    """``minibatch_size`` rows of the module's batch in its units: sequences in
    proportion ``N * minibatch_size / timesteps`` (RLlib's rule), else rows."""
    if module_batch.get(Columns.SEQ_LENS) is None:
        return minibatch_size
    return int(minibatch_units(module_batch) * (minibatch_size / len(module_batch)))


def rows_of(rows: SampleBatch, index: np.ndarray) -> SampleBatch:
    """The module batch's rows (sequences) at ``index`` as a new batch of copies; the
    batch itself when ``index`` is all of it in order."""
    count = minibatch_units(rows)
    if len(index) == count and np.array_equal(index, np.arange(count)):
        return rows
    return module_batch(_taken(dict(rows), index))


def reorder(module_batch: SampleBatch, order: np.ndarray) -> None:
    """Puts the module batch's rows (sequences) in ``order``, in place, as RLlib's
    ``SampleBatch.shuffle`` leaves a batch it shuffled.

    Relies on: ``SampleBatch.shuffle`` permutes every column in place (``update``)
    and clears ``intercepted_values``."""
    if np.array_equal(order, np.arange(len(order))):
        return
    module_batch.update(_taken(dict(module_batch), order))
    module_batch.intercepted_values = {}


def _taken(columns: dict, index: np.ndarray) -> dict:
    on_device: dict = {}

    def take(value):
        if isinstance(value, torch.Tensor):
            if value.device not in on_device:
                on_device[value.device] = torch.as_tensor(index, device=value.device)
            return value.index_select(0, on_device[value.device])  # a third of value[index]'s time
        return value[index]

    return tree.map_structure(take, columns)


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
