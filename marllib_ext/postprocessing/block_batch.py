"""The centralized-critic train batch built straight from ``RolloutBlock`` arrays (no
episode chunks, no learner connectors): what ``JointAdvantageConnector`` computes from
chunks, with GAE over each ``(T, B)`` block (``ops.block_gae``).

Per team (one joint critic and its actor modules):
- team reward ``r[t, b]``: the sum of the rewards of the team's agents present at step
  ``t`` of world ``b``;
- ``V(s)`` of the state acted on and of the state after each step (the final one where
  an episode ended, bootstrapped where it was truncated or cut by the sampler);
- advantages standardized over the rows where an agent of the team acted, over every
  block of the update;
- each actor module gets one row per (step, world, agent) its agents acted at, with the
  team's advantage and value target there; the critic gets one row per (step, world).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY
from marllib_ext.ops.advantages import block_gae, standardize_valid
from marllib_ext.policies.joint_critic import OLD_VALUES, STATE
from marllib_ext.postprocessing.joint_advantage import TEAM_ADVANTAGE_MEAN, TEAM_VALUE_MEAN
from marllib_ext.rollout.blocks import RolloutBlock


@dataclass
class TeamBlock:
    """One block's team view: ``(T, B)`` arrays."""

    block: RolloutBlock
    team: list[int]  # indices of the team's agents in block.agents
    values: np.ndarray
    advantages: np.ndarray
    value_targets: np.ndarray
    acting: np.ndarray  # bool, an agent of the team acted


def _values(critic, states: np.ndarray, device) -> np.ndarray:
    rows = torch.from_numpy(states.reshape(-1, states.shape[-1])).to(device)
    with torch.no_grad():
        values = critic.compute_values({STATE: rows})
    return values.cpu().numpy().astype(np.float64).reshape(states.shape[:-1])


def team_block(
    block: RolloutBlock, critic, team_modules: set[str] | None, *, gamma: float, lambda_: float,
    device,
) -> TeamBlock:  # fmt: skip
    """Team GAE on one block (``team_modules``: the team's actor modules, ``None``:
    every agent)."""
    team = [
        i for i, a in enumerate(block.agents)
        if team_modules is None or block.module_of[a] in team_modules
    ]  # fmt: skip
    alive = block.alive[:, :, team]
    rewards = np.where(alive, block.rewards[:, :, team], 0.0)
    if not np.isfinite(rewards).all():
        t, world, i = np.argwhere(~np.isfinite(rewards))[0]
        agent = block.agents[team[i]]
        raise ValueError(
            f"non-finite reward in the batch of module {block.module_of[agent]!r} "
            f"(agent {agent!r}, world {world}, step {t} of the block): check the env's "
            "reward for NaN/inf"
        )
    values = _values(critic, block.states, device)
    next_values = _values(critic, block.next_states, device)
    advantages, value_targets = block_gae(
        rewards.sum(-1), values, next_values, block.terminated, block.truncated,
        gamma=gamma, lambda_=lambda_,
    )  # fmt: skip
    return TeamBlock(block, team, values, advantages, value_targets, alive.any(-1))


def _tensor(array: np.ndarray, device, dtype=None) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).to(device)


def _actor_columns(teams: list[TeamBlock], standardized: list[np.ndarray], module_id: str):
    """Numpy columns of one actor module: its agents' rows, block by block."""
    parts: dict[str, list[np.ndarray]] = {}
    for team, advantages in zip(teams, standardized, strict=True):
        block = team.block
        for i in team.team:
            agent = block.agents[i]
            if block.module_of[agent] != module_id:
                continue
            rows = block.alive[:, :, i]
            columns = {
                Columns.OBS: block.observations[agent][rows],
                Columns.ACTIONS: block.actions[agent][rows],
                Columns.ADVANTAGES: advantages[rows],
                Columns.VALUE_TARGETS: team.value_targets[rows],
                **{k: v[rows] for k, v in block.outputs[agent].items()},
            }
            if block.action_masks is not None:
                columns[ACTION_MASK_KEY] = block.action_masks[agent][rows]
            for column, array in columns.items():
                parts.setdefault(column, []).append(array)
    return {column: np.concatenate(arrays) for column, arrays in parts.items()}


def joint_critic_block_batch(
    blocks: list[RolloutBlock],
    *,
    critic,
    critic_module_id: str,
    actor_module_ids: list[str] | None,
    settings: Any,
    device,
    metrics=None,
) -> dict[str, dict[str, Any]]:
    """``{module_id: {column: tensor}}`` for one joint critic and its team's actor
    modules, as ``JointAdvantageConnector`` writes them (without bootstrap rows)."""
    team_modules = None if actor_module_ids is None else set(actor_module_ids)
    teams = [
        team_block(
            block, critic, team_modules, gamma=float(settings.gamma),
            lambda_=float(settings.lambda_), device=device,
        )
        for block in blocks
    ]  # fmt: skip
    acting = np.concatenate([t.acting.ravel() for t in teams])
    raw = np.concatenate([t.advantages.ravel() for t in teams])
    standardized = np.where(acting, standardize_valid(raw, acting), 0.0)
    splits = np.cumsum([t.acting.size for t in teams])[:-1]
    per_block = [
        part.reshape(t.acting.shape)
        for part, t in zip(np.split(standardized, splits), teams, strict=True)
    ]
    if metrics is not None:
        values = np.concatenate([t.values.ravel() for t in teams])
        metrics.log_dict(
            {
                TEAM_VALUE_MEAN: float(values.mean()),
                TEAM_ADVANTAGE_MEAN: float(raw.mean()),
            },
            key=critic_module_id,
            window=1,
        )
    modules = sorted({b.module_of[b.agents[i]] for t in teams for b in [t.block] for i in t.team})
    batch: dict[str, dict[str, Any]] = {}
    for module_id in modules:
        columns = _actor_columns(teams, per_block, module_id)
        masks = columns.pop(ACTION_MASK_KEY, None)
        out = {}
        for column, array in columns.items():
            dtype = np.float32 if array.dtype == np.float64 else None
            out[column] = _tensor(array, device, dtype)
        if masks is not None:
            out[Columns.OBS] = {
                OBSERVATION_KEY: out[Columns.OBS],
                ACTION_MASK_KEY: _tensor(masks, device, np.float32),
            }
        out[Columns.LOSS_MASK] = torch.ones(len(out[Columns.ACTIONS]), dtype=torch.bool).to(device)
        batch[module_id] = out
    states = np.concatenate([t.block.states.reshape(-1, t.block.states.shape[-1]) for t in teams])
    value_targets = np.concatenate([t.value_targets.ravel() for t in teams])
    critic_columns = {
        STATE: _tensor(states, device, np.float32),
        Columns.VALUE_TARGETS: _tensor(value_targets, device, np.float32),
        Columns.LOSS_MASK: torch.ones(len(states), dtype=torch.bool).to(device),
    }
    if getattr(settings, "value_clip", None) is not None:
        old = torch.from_numpy(np.concatenate([t.values.ravel() for t in teams]))
        old = critic.normalized(old) if hasattr(critic, "normalized") else old
        critic_columns[OLD_VALUES] = old.to(torch.float32).to(device)
    batch[critic_module_id] = critic_columns
    return batch
