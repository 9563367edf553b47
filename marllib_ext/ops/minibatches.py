"""Minibatch counts and sizes of an SGD phase over module batches of different sizes
(no Ray import)."""

from __future__ import annotations

import math


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
