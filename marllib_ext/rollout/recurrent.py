"""The states of recurrent modules acting on a batched rollout: one state row per
(agent, world) a module serves, carried between steps and ``sample()`` calls, and the
module's initial state where the world's episode starts. The batch a stateful module
sees is RLlib's on env runners: a time rank of 1 on every column and
``Columns.STATE_IN`` without one (``AddTimeDimToBatchAndZeroPad``), and its outputs lose
the time rank again (``RemoveSingleTsTimeRankFromBatch``).

The state each row acted from is kept with the module's outputs, one flat column per
state tensor (``state_in/<path>``, ``state_columns``), so a learner can start a
sequence at any step from it (``nested_state``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import tree
from ray.rllib.core.columns import Columns


class RecurrentStates:
    """``{module: state rows}`` of the recurrent modules of one rollout; rows are in
    the order of the module's input (agent-major: ``agent k, world b`` at ``k * B + b``)."""

    def __init__(self) -> None:
        self.states: dict[str, Any] = {}

    def clear(self) -> None:
        self.states.clear()

    def module_input(self, module_id: str, module, batch: dict, starting: np.ndarray) -> dict:
        """``batch`` with a time rank of 1 and the module's state for its rows;
        ``starting``: ``(rows,)`` the rows whose world's episode starts now."""
        initial = module.get_initial_state()
        state = self.states.get(module_id)
        if state is None:
            state = tree.map_structure(lambda s: s.expand(len(starting), *s.shape).clone(), initial)
        elif starting.any():
            fresh = torch.from_numpy(starting)

            def restart(s, s0):
                return torch.where(fresh.reshape(-1, *[1] * s0.dim()), s0, s)

            state = tree.map_structure(restart, state, initial)
        self.states[module_id] = state
        batch = tree.map_structure(lambda column: column.unsqueeze(1), batch)
        return {**batch, Columns.STATE_IN: state}

    def module_output(self, module_id: str, out: dict) -> dict:
        """Keeps the module's next state; its other outputs without the time rank, and
        the state the rows acted from (``state_columns``)."""
        acted_from = state_columns(self.states[module_id])
        self.states[module_id] = out.pop(Columns.STATE_OUT)
        out = {k: v[:, 0] if isinstance(v, torch.Tensor) else v for k, v in out.items()}
        return {**out, **acted_from}


STATE_IN_PREFIX = "state_in/"


def state_columns(state) -> dict[str, Any]:
    """A nested state (``{"h": rows}``, ``{"actor": {"h", "c"}}``) as flat columns
    ``state_in/<path>``."""
    return {
        STATE_IN_PREFIX + "/".join(map(str, path)): value
        for path, value in tree.flatten_with_path(state)
    }


def is_state_column(column: str) -> bool:
    return column.startswith(STATE_IN_PREFIX)


def nested_state(columns: dict[str, Any]) -> dict[str, Any]:
    """The nested state of the ``state_in/<path>`` columns among ``columns``."""
    nested: dict[str, Any] = {}
    for column, value in columns.items():
        if not is_state_column(column):
            continue
        *parents, leaf = column[len(STATE_IN_PREFIX) :].split("/")
        node = nested
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return nested
