"""Minibatch counts and sizes of an SGD phase over module batches of different sizes
(no Ray import)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np


def minibatch_steps(num_epochs: int, rows: int, minibatch_size: int | None) -> int:
    """``ceil(num_epochs * rows / minibatch_size)``: the minibatch steps that give a batch
    of ``rows`` rows ``num_epochs`` passes (``minibatch_size`` ``None``: one step on the
    whole batch per epoch)."""
    return math.ceil(num_epochs * rows / (minibatch_size or rows))


def equal_pass_minibatch_sizes(module_rows: dict[str, int], minibatch_size: int) -> dict[str, int]:
    """Per module, ``round(minibatch_size * rows / largest_rows)`` (at least 1): the
    same share of every module's batch as ``minibatch_size`` is of the largest one's, so
    ``minibatch_steps(num_epochs, largest_rows, minibatch_size)`` steps give every module
    ``num_epochs`` passes."""
    largest = max(module_rows.values())
    return {
        module_id: max(1, round(minibatch_size * rows / largest))
        for module_id, rows in module_rows.items()
    }


def cyclic_minibatch_rows(
    units: dict[str, int],
    sizes: dict[str, int],
    *,
    num_epochs: int,
    num_total_minibatches: int = 0,
    shuffle: bool,
    orders: dict[str, np.ndarray] | None = None,
    permutation=np.random.permutation,
) -> Iterator[dict[str, np.ndarray]]:
    """The row indices of each minibatch step: per module ``m``, ``sizes[m]`` of its
    ``units[m]`` rows (sequences, for a recurrent module's ``[N, L]`` batch), read in
    order from where the previous step stopped and cycling through the batch.

    Each time a module's cursor reaches the end of its rows it has covered one more
    pass, and with ``shuffle`` its order is permuted: ``order <- order[permutation(n)]``
    (the first pass reads the rows as they are). Steps continue until every module has
    ``num_epochs`` passes, or for exactly ``num_total_minibatches`` steps when > 0.
    ``orders`` (module -> ``(n,)`` int array, starting at ``arange(n)``) is updated in
    place, so the caller can leave the batch in the order the last pass left it.

    This is RLlib's ``MiniBatchCyclicIterator`` on indices (a step that ends exactly at
    a module's last row starts its next pass, so the same ``permutation`` draws give
    the same rows); the rows are gathered once per step instead of every column being
    copied at every pass."""
    orders = {} if orders is None else orders
    start = dict.fromkeys(units, 0)
    passes = dict.fromkeys(units, 0)
    for module_id, count in units.items():
        if count == 0:
            raise ValueError(f"module {module_id!r} has no rows to take minibatches from")
        orders.setdefault(module_id, np.arange(count))
    steps = 0
    while (num_total_minibatches > 0 and steps < num_total_minibatches) or (
        num_total_minibatches == 0 and min(passes.values()) < num_epochs
    ):
        minibatch = {}
        for module_id, count in units.items():
            position, wanted, parts = start[module_id], sizes[module_id], []
            while position + wanted >= count:
                parts.append(orders[module_id][position:])
                wanted -= count - position
                position = 0
                passes[module_id] += 1
                if shuffle:
                    orders[module_id] = orders[module_id][permutation(count)]
            end = position + wanted
            if end > position:
                parts.append(orders[module_id][position:end])
            minibatch[module_id] = parts[0] if len(parts) == 1 else np.concatenate(parts)
            start[module_id] = end
        yield minibatch
        steps += 1
