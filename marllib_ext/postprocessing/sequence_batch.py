"""Recurrent modules' rows as sequences (``ops.sequences``) in the block batch builders:
RLlib's zero-padded ``[N, L, ...]`` layout, each sequence started from the state the
rollout recorded at its first step (``rollout.recurrent``), and a recurrent value head's
values over the same sequences."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY
from marllib_ext.ops.sequences import (
    gather_sequences,
    scatter_sequences,
    segment_starts,
    sequence_layout,
)
from marllib_ext.policies.recurrent import max_seq_len
from marllib_ext.rollout.blocks import RolloutBlock
from marllib_ext.rollout.recurrent import is_state_column, nested_state, state_columns

# Row column until a recurrent module's rows become sequences: the world's episode
# starts at the row's step.
EPISODE_START = "episode_start"


def episode_starts(block: RolloutBlock) -> np.ndarray:
    """``(T, B)`` the world's episode starts at the step (none where not recorded)."""
    if block.starts is None:
        return np.zeros(block.terminated.shape, bool)
    return block.starts


def module_sequences(
    columns: dict[str, np.ndarray], new_segment: np.ndarray, length: int
) -> dict[str, Any]:
    """A recurrent module's rows (in order) as RLlib's zero-padded sequences
    (``ops.sequences``): every column ``(N, L, ...)`` (action masks all legal on
    padding), ``Columns.STATE_IN`` the state recorded at each sequence's first row,
    ``Columns.SEQ_LENS`` and the ``(N, L)`` loss mask."""
    index, valid = sequence_layout(new_segment, length)
    out: dict[str, Any] = {}
    state = {}
    for column, array in columns.items():
        if is_state_column(column):
            state[column] = array[index[:, 0]]
        else:
            fill = True if column == ACTION_MASK_KEY else 0
            out[column] = gather_sequences(array, index, valid, fill=fill)
    out[Columns.STATE_IN] = nested_state(state)
    out[Columns.SEQ_LENS] = valid.sum(axis=1).astype(np.int32)
    out[Columns.LOSS_MASK] = valid
    return out


def recurrent_values(module, block: RolloutBlock, i: int, device):
    """``(T, B)`` values of agent ``i``'s steps and of its observation after each step,
    from a recurrent module: its steps as sequences (``module_sequences``) each run from
    the state recorded at its first step, with one more position holding the
    observation after the sequence's last step, so ``V`` after step ``t`` is the output
    at the next position (the state carried over the step). 0 where it is absent."""
    agent = block.agents[i]
    present = block.alive[:, :, i]
    worlds, steps = np.nonzero(present.T)  # world by world, steps in order
    new = segment_starts([worlds], steps, episode_starts(block)[steps, worlds])
    index, valid = sequence_layout(new, max_seq_len(module))
    lengths = valid.sum(axis=1)
    last = index[np.arange(len(index)), lengths - 1]

    def extended(now: np.ndarray, after: np.ndarray, fill=0) -> np.ndarray:
        sequences = gather_sequences(now[steps, worlds], index, valid, fill=fill)
        out = np.concatenate([sequences, sequences[:, :1]], axis=1)  # one more position
        out[:, -1] = fill
        out[np.arange(len(index)), lengths] = after[steps, worlds][last]
        return out

    observations = extended(block.observations[agent], block.next_observations[agent])
    batch = {Columns.OBS: numpy_tensor(observations, device, np.float32)}
    if block.action_masks is not None:
        masks = extended(block.action_masks[agent], block.next_action_masks[agent], fill=1)
        batch[Columns.OBS] = {
            OBSERVATION_KEY: batch[Columns.OBS],
            ACTION_MASK_KEY: numpy_tensor(masks, device, np.float32),
        }
    state = {
        column: numpy_tensor(array[steps, worlds][index[:, 0]], device)
        for column, array in block.outputs[agent].items()
        if is_state_column(column)
    }
    batch[Columns.STATE_IN] = nested_state(state)
    with torch.no_grad():
        out = module.compute_values(batch).cpu().numpy().astype(np.float64)
    rows = len(steps)
    values = np.zeros(present.shape)
    next_values = np.zeros(present.shape)
    values[steps, worlds] = scatter_sequences(out[:, :-1], index, valid, rows)
    next_values[steps, worlds] = scatter_sequences(out[:, 1:], index, valid, rows)
    return values, next_values


def critic_resets(block: RolloutBlock) -> np.ndarray:
    """``(T, B)`` the steps where a recurrent critic starts from its initial state:
    where the world's episode starts, and after a step where it ended."""
    ended = block.terminated | block.truncated
    resets = episode_starts(block).copy()
    resets[1:] |= ended[:-1]
    return resets


def recurrent_block_values(critic, inputs, after, resets: np.ndarray, device):
    """A recurrent critic's ``(T, B)`` values and next values of a block (its
    ``block_values`` on the ``(T, B, ...)`` input columns) and the state entered at each
    step as ``state_in/<key>`` columns ``(T, B, ...)``."""

    def tensors(columns):
        return {k: numpy_tensor(v, device, np.float32) for k, v in columns.items()}

    with torch.no_grad():
        values, next_values, entered = critic.block_values(
            tensors(inputs), tensors(after), torch.from_numpy(resets).to(device)
        )
    state = {column: tensor.cpu().numpy() for column, tensor in state_columns(entered).items()}
    as_numpy = [v.cpu().numpy().astype(np.float64) for v in (values, next_values)]
    return *as_numpy, state


def numpy_tensor(array: np.ndarray, device, dtype=None) -> torch.Tensor:
    """``array`` as a contiguous tensor on ``device`` (cast to ``dtype`` if given)."""
    return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).to(device)
