"""The batch of a policy module with its own value head (the independent family:
``ippo``, ``ia2c``, ``itrpo``) from rollout blocks, on both sampling paths (episode
chunks arrive as blocks, ``rollout.episode_blocks``): per agent, GAE over its own steps
on its own reward and its module's ``V(o)`` (``ops.own_step_gae``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY
from marllib_ext.ops.advantages import own_step_gae, standardize_valid
from marllib_ext.policies.recurrent import max_seq_len
from marllib_ext.postprocessing.block_batch import (
    episode_major,
    module_tensors,
    present_rewards,
    row_keys,
)
from marllib_ext.postprocessing.sequence_batch import (
    EPISODE_START,
    episode_starts,
    numpy_tensor,
    recurrent_values,
)
from marllib_ext.rollout.blocks import RolloutBlock


def _module_input(observations: np.ndarray, masks: np.ndarray | None, device) -> dict:
    rows = numpy_tensor(observations.reshape(-1, observations.shape[-1]), device)
    if masks is None:
        return {Columns.OBS: rows}
    flat = numpy_tensor(masks.reshape(-1, masks.shape[-1]), device, np.float32)
    return {Columns.OBS: {OBSERVATION_KEY: rows, ACTION_MASK_KEY: flat}}


def own_value_block_batch(
    blocks: list[RolloutBlock], *, module, module_id: str, settings: Any, device
) -> dict[str, Any] | None:
    """``{column: tensor}`` of one policy module with its own value head (``ippo``):
    per agent, GAE over the agent's own steps (``ops.own_step_gae``: the rewards it
    earns between its turns on its step, bootstrapped from its next observation where
    the world was truncated or cut by the sampler, not where the agent died or the
    world terminated); advantages standardized over the module's rows. A recurrent
    module's values come from its sequences (``recurrent_values``), its rows go as
    sequences. ``None`` where no agent of the block uses the module."""
    parts: dict[str, list[np.ndarray]] = {}
    keys: list[list[np.ndarray]] = []
    recurrent = max_seq_len(module) is not None
    for k, block in enumerate(blocks):
        for i, agent in enumerate(block.agents):
            if block.module_of[agent] != module_id:
                continue
            present = block.alive[:, :, i]
            if recurrent:
                values, next_values = recurrent_values(module, block, i, device)
            else:
                values, next_values = feed_forward_values(module, block, agent, device)
            rewards = present_rewards(block, [i])[:, :, 0]
            advantages, value_targets = own_step_gae(
                rewards, values, next_values, present, block.present_after()[:, :, i],
                block.terminated, block.truncated, block.died[:, :, i],
                gamma=float(settings.gamma), lambda_=float(settings.lambda_),
            )  # fmt: skip
            columns = {
                Columns.OBS: block.observations[agent][present],
                Columns.ACTIONS: block.actions[agent][present],
                Columns.ADVANTAGES: advantages[present],
                Columns.VALUE_TARGETS: value_targets[present],
                **{k: v[present] for k, v in block.outputs[agent].items()},
                EPISODE_START: episode_starts(block)[present],
            }
            if block.action_masks is not None:
                columns[ACTION_MASK_KEY] = block.action_masks[agent][present]
            for column, array in columns.items():
                parts.setdefault(column, []).append(array)
            keys.append(row_keys(k, i, present))
    if not parts:
        return None
    columns = {column: np.concatenate(arrays) for column, arrays in parts.items()}
    advantages = columns[Columns.ADVANTAGES]
    columns[Columns.ADVANTAGES] = standardize_valid(advantages, np.ones(len(advantages), bool))
    columns = episode_major(columns, [np.concatenate(p) for p in zip(*keys, strict=True)], module)
    return module_tensors(columns, device)


def feed_forward_values(module, block: RolloutBlock, agent: str, device):
    """``(T, B)`` ``V(o)`` of what ``agent`` acted on and of its observation after each
    step, from a feed-forward module's value head."""
    shape = block.terminated.shape
    with torch.no_grad():
        values = module.compute_values(
            _module_input(block.observations[agent], _masks(block.action_masks, agent), device)
        )
        next_values = module.compute_values(
            _module_input(
                block.next_observations[agent], _masks(block.next_action_masks, agent), device
            )
        )
    return (
        values.cpu().numpy().astype(np.float64).reshape(shape),
        next_values.cpu().numpy().astype(np.float64).reshape(shape),
    )


def _masks(masks: dict[str, np.ndarray] | None, agent: str) -> np.ndarray | None:
    return None if masks is None else masks[agent]
