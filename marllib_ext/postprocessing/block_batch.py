"""Train batches built straight from ``RolloutBlock`` arrays (no episode chunks, no
learner connectors), with GAE over each ``(T, B)`` block (``ops.block_gae``): the
centralized critic's (``JointAdvantageConnector`` builds it from blocks or from
chunks read as blocks); a policy's own value head's is ``own_value_batch``.

The centralized critic's, per team (one joint critic and its actor modules):
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
import tree
from ray.rllib.core.columns import Columns

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY
from marllib_ext.ops.advantages import block_gae, standardize_valid
from marllib_ext.ops.sequences import (
    segment_starts,
)
from marllib_ext.policies.joint_critic import OLD_VALUES, STATE
from marllib_ext.policies.recurrent import max_seq_len
from marllib_ext.policies.vd_critic import AGENT_OBS, AGENT_PRESENT
from marllib_ext.postprocessing.block_hooks import BlockHooks
from marllib_ext.postprocessing.sequence_batch import (
    EPISODE_START,
    critic_resets,
    episode_starts,
    module_sequences,
    numpy_tensor,
    recurrent_block_values,
)
from marllib_ext.rllib_compat import plain_module
from marllib_ext.rollout.blocks import RolloutBlock
from marllib_ext.rollout.recurrent import is_state_column

TEAM_ADVANTAGE_MEAN = "team_advantage_mean"
TEAM_VALUE_MEAN = "team_value_mean"
# A reward bonus (``BlockHooks.block_reward_bonus``): its mean over the team's rows, and
# its share of the team reward's magnitude there (how much of what GAE sees it is).
REWARD_BONUS_MEAN = "reward_bonus_mean"
REWARD_BONUS_SHARE = "reward_bonus_share"
# Actor batch column: each row's index in its team's critic batch (HAPPO's factor M is
# kept per team row).
TEAM_ROW = "happo_team_row"
# Advantage-connector class attribute: the ``joint_critic_block_batch`` options of
# the class (its critic's inputs, HAPPO's team rows).
BLOCK_BATCH_OPTIONS = "BLOCK_BATCH_OPTIONS"


def block_batch_options(connector_class: type) -> dict[str, Any]:
    """The ``joint_critic_block_batch`` options of ``connector_class``."""
    return dict(getattr(connector_class, BLOCK_BATCH_OPTIONS, {}))


@dataclass
class TeamView:
    """One block's team view: ``(T, B)`` arrays."""

    block: RolloutBlock
    team: list[int]  # indices of the team's agents in block.agents
    inputs: dict[str, np.ndarray]  # the critic's inputs, (T, B, ...)
    next_inputs: dict[str, np.ndarray]  # its inputs after each step
    values: np.ndarray
    advantages: np.ndarray
    value_targets: np.ndarray
    acting: np.ndarray  # bool, an agent of the team acted
    rewards: np.ndarray  # the team reward
    # A recurrent critic's state entered at each step, {"state_in/<key>": (T, B, h)}.
    critic_state: dict[str, np.ndarray] | None = None
    reward_bonus: np.ndarray | None = None  # the part of ``rewards`` a hook added


def present_rewards(block: RolloutBlock, agents: list[int]) -> np.ndarray:
    """``(T, B, len(agents))`` the rewards of ``agents`` (indices into ``block.agents``)
    where they count (``block.rewarded``, by default where they were present), 0
    elsewhere; a non-finite one raises ``ValueError`` naming
    its module, agent, world and step."""
    rewards = np.where(block.reward_counted()[:, :, agents], block.rewards[:, :, agents], 0.0)
    if not np.isfinite(rewards).all():
        t, world, i = np.argwhere(~np.isfinite(rewards))[0]
        agent = block.agents[agents[i]]
        raise ValueError(
            f"non-finite reward in the batch of module {block.module_of[agent]!r} "
            f"(agent {agent!r}, world {world}, step {t} of the block): check the env's "
            "reward for NaN/inf"
        )
    return rewards


def critic_inputs(
    block: RolloutBlock, team: list[int], *, after: bool, agent_obs: bool, hooks: BlockHooks
) -> dict[str, np.ndarray]:
    """The joint critic's inputs per ``(step, world)``, ``(T, B, ...)``: the global
    state acted on (``after``: the state after each step), as ``hooks`` give it; with
    ``agent_obs`` (the value-decomposition critic) also each team agent's observation,
    zero-padded to the largest, and whether it is present (after a step:
    ``RolloutBlock.present_after``)."""
    out = {STATE: hooks.block_critic_state(block, team, after=after)}
    if agent_obs:
        observations = block.next_observations if after else block.observations
        present = (block.present_after() if after else block.alive)[:, :, team]
        agents = [block.agents[i] for i in team]
        width = max(observations[a].shape[-1] for a in agents)
        stacked = np.zeros((*present.shape, width), np.float32)
        for j, agent in enumerate(agents):
            obs = observations[agent]
            stacked[:, :, j, : obs.shape[-1]] = np.where(present[:, :, j, None], obs, 0.0)
        out[AGENT_OBS] = stacked
        out[AGENT_PRESENT] = present.astype(np.float32)
    return out


def world_major(array: np.ndarray) -> np.ndarray:
    """``(T, B, ...)`` as ``(B * T, ...)`` rows, world by world: the order of RLlib's
    batches (episode by episode), which an unshuffled first epoch's minibatches follow."""
    return array.swapaxes(0, 1).reshape(-1, *array.shape[2:])


def episode_major(
    columns: dict[str, np.ndarray], keys: list[np.ndarray], module=None
) -> dict[str, np.ndarray]:
    """Actor rows reordered by ``keys`` (block, world, agent, step), most significant
    first: each world's agents' steps together, as RLlib batches episode by episode.
    For a recurrent ``module``, the rows as its sequences (``module_sequences``)."""
    order = np.lexsort(tuple(reversed(keys)))
    columns = {column: array[order] for column, array in columns.items()}
    episode_starts = columns.pop(EPISODE_START, None)
    length = None if module is None else max_seq_len(module)
    if length is None:
        return {c: v for c, v in columns.items() if not is_state_column(c)}
    keys = [key[order] for key in keys]
    return module_sequences(columns, segment_starts(keys[:-1], keys[-1], episode_starts), length)


def row_keys(k: int, agent_position: int, rows: np.ndarray) -> list[np.ndarray]:
    """``(block, world, agent, step)`` of the rows selected by the ``(T, B)`` mask."""
    steps, worlds = np.nonzero(rows)
    return [np.full(len(steps), k), worlds, np.full(len(steps), agent_position), steps]


def block_values(compute, columns: dict[str, np.ndarray], device) -> np.ndarray:
    """``(T, B)`` ``compute(rows)`` (a critic's value head) of ``(T, B, ...)`` inputs."""
    shape = columns[STATE].shape[:2]
    inputs = {
        k: numpy_tensor(v.reshape(-1, *v.shape[2:]), device, np.float32) for k, v in columns.items()
    }
    with torch.no_grad():
        values = compute(inputs)
    return values.cpu().numpy().astype(np.float64).reshape(shape)


def team_agents(block: RolloutBlock, team_modules: set[str] | None) -> list[int]:
    """Indices in ``block.agents`` of the agents whose module is in ``team_modules``
    (``None``: every agent)."""
    return [
        i for i, a in enumerate(block.agents)
        if team_modules is None or block.module_of[a] in team_modules
    ]  # fmt: skip


def team_block(
    block: RolloutBlock, critic, team_modules: set[str] | None, *, gamma: float, lambda_: float,
    device, agent_obs: bool = False, hooks: BlockHooks | None = None,
) -> TeamView:  # fmt: skip
    """Team GAE on one block (``team_modules``: the team's actor modules, ``None``:
    every agent; ``hooks``: the advantage connector's block hooks)."""
    hooks = hooks or BlockHooks()
    team = team_agents(block, team_modules)
    alive = block.alive[:, :, team]
    rewards = present_rewards(block, team)
    inputs = critic_inputs(block, team, after=False, agent_obs=agent_obs, hooks=hooks)
    after = critic_inputs(block, team, after=True, agent_obs=agent_obs, hooks=hooks)
    critic_state = None
    if getattr(critic, "rnn_type", None) is not None:
        values, next_values, critic_state = recurrent_block_values(
            critic, inputs, after, critic_resets(block), device
        )
    else:
        values = block_values(critic.compute_values, inputs, device)
        next_values = block_values(critic.compute_values, after, device)
    team_rewards = rewards.sum(-1)
    bonus = hooks.block_reward_bonus(block, team)
    if bonus is not None:
        team_rewards = team_rewards + bonus
    advantages, value_targets = block_gae(
        team_rewards, values, next_values, block.terminated, block.truncated,
        gamma=gamma, lambda_=lambda_,
    )  # fmt: skip
    return TeamView(
        block, team, inputs, after, values, advantages, value_targets, alive.any(-1),
        team_rewards, critic_state, bonus,
    )  # fmt: skip


def standardized_over_teams(arrays: list[np.ndarray], teams: list[TeamView]) -> list:
    """Each block's ``(T, B)`` array standardized over the rows where the team acted in
    every block together, 0 elsewhere."""
    acting = np.concatenate([t.acting.ravel() for t in teams])
    flat = np.concatenate([a.ravel() for a in arrays])
    standardized = np.where(acting, standardize_valid(flat, acting), 0.0)
    splits = np.cumsum([t.acting.size for t in teams])[:-1]
    return [
        part.reshape(t.acting.shape)
        for part, t in zip(np.split(standardized, splits), teams, strict=True)
    ]


def _actor_columns(
    teams: list[TeamView],
    standardized: list[np.ndarray],
    module_id: str,
    team_rows: bool,
    agent_terms: dict[tuple[int, int], np.ndarray],
    terms_column: str | None,
    extra: list[dict[str, np.ndarray]],
    module=None,
):
    """Numpy columns of one actor module: its agents' rows, block by block; with
    ``team_rows``, each row's index in the critic's rows (``TEAM_ROW``);
    ``agent_terms`` (``BlockHooks.block_agent_terms``) added to the advantages or
    written to ``terms_column``. Rows go world by world (``episode_major``; a recurrent
    ``module``'s as sequences)."""
    parts: dict[str, list[np.ndarray]] = {}
    keys: list[list[np.ndarray]] = []
    offsets = np.cumsum([0] + [t.acting.size for t in teams])[:-1]  # each block's first row
    for k, (team, advantages, offset) in enumerate(zip(teams, standardized, offsets, strict=True)):
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
                **{key: v[rows] for key, v in block.outputs[agent].items()},
                **{column: values[rows] for column, values in extra[k].items()},
                EPISODE_START: episode_starts(block)[rows],
            }
            terms = agent_terms.get((k, i))
            if terms is not None and terms_column is not None:
                columns[terms_column] = terms
            elif terms is not None:
                columns[Columns.ADVANTAGES] = columns[Columns.ADVANTAGES] + terms
            if block.action_masks is not None:
                columns[ACTION_MASK_KEY] = block.action_masks[agent][rows]
            if team_rows:  # critic rows go world by world (world_major)
                horizon, num_envs = rows.shape
                index = offset + np.arange(rows.size).reshape(num_envs, horizon).T
                columns[TEAM_ROW] = index[rows].astype(np.float64)
            for column, array in columns.items():
                parts.setdefault(column, []).append(array)
            keys.append(row_keys(k, i, rows))
    columns = {column: np.concatenate(arrays) for column, arrays in parts.items()}
    return episode_major(columns, [np.concatenate(key) for key in zip(*keys, strict=True)], module)


def joint_critic_block_batch(
    blocks: list[RolloutBlock], *, connector, rl_module, device, metrics=None
) -> dict[str, dict[str, Any]]:
    """``{module_id: {column: tensor}}`` for one joint critic and its team's actor
    modules, with ``connector``'s (a ``JointAdvantageConnector``) settings, hooks and
    options (``block_batch_options``): with the option ``agent_obs``, the
    value-decomposition critic's per-agent observations and presence
    (``critic_inputs``); with ``team_rows``, HAPPO's ``TEAM_ROW`` column; the
    connector's ``BlockHooks`` change the critic's state, the raw advantages and the
    per-agent terms (EFX)."""
    options = block_batch_options(type(connector))
    settings = connector.settings
    critic_module_id = connector.critic_module_id
    critic = plain_module(rl_module, critic_module_id)
    teams = [
        team_block(
            block, critic, connector.actor_module_ids, gamma=float(settings.gamma),
            lambda_=float(settings.lambda_), device=device,
            agent_obs=options.get("agent_obs", False), hooks=connector,
        )
        for block in blocks
    ]  # fmt: skip
    raw = np.concatenate([t.advantages[t.acting] for t in teams])
    if metrics is not None:
        values = np.concatenate([t.values[t.acting] for t in teams])
        logged = {TEAM_VALUE_MEAN: float(values.mean()), TEAM_ADVANTAGE_MEAN: float(raw.mean())}
        if any(t.reward_bonus is not None for t in teams):
            paid = np.concatenate([t.reward_bonus[t.acting] for t in teams])
            total = np.abs(np.concatenate([t.rewards[t.acting] for t in teams])).sum()
            logged[REWARD_BONUS_MEAN] = float(paid.mean())
            logged[REWARD_BONUS_SHARE] = float(np.abs(paid).sum() / total) if total > 0 else 0.0
        metrics.log_dict(logged, key=critic_module_id, window=1)
    adjusted, slack = connector.adjust_block_advantages(teams, metrics)
    standardized = standardized_over_teams(adjusted, teams)
    actor_extra, critic_extra = connector.block_extra_columns(critic, teams, device, metrics)
    per_block = [
        connector.combine_after_standardizing(advantages, extra)
        for advantages, extra in zip(standardized, actor_extra, strict=True)
    ]
    agent_terms = connector.block_agent_terms(rl_module, teams, slack, metrics)
    modules = sorted({b.module_of[b.agents[i]] for t in teams for b in [t.block] for i in t.team})
    batch: dict[str, dict[str, Any]] = {}
    for module_id in modules:
        columns = _actor_columns(
            teams,
            per_block,
            module_id,
            options.get("team_rows", False),
            agent_terms,
            connector.agent_terms_column,
            actor_extra,
            plain_module(rl_module, module_id) if module_id in rl_module else None,
        )
        batch[module_id] = module_tensors(columns, device)
    batch[critic_module_id] = critic_batch(critic, teams, critic_extra, settings, device)
    return batch


def critic_batch(critic, teams: list[TeamView], critic_extra, settings, device) -> dict:
    """The joint critic's columns: one row per (step, world), world by world; a
    recurrent critic's rows as its sequences (``module_sequences``: each from the state
    entered at its first step, cut where an episode starts)."""
    columns = {
        column: np.concatenate([world_major(t.inputs[column]) for t in teams])
        for column in teams[0].inputs
    }
    columns[Columns.VALUE_TARGETS] = np.concatenate([world_major(t.value_targets) for t in teams])
    for column in critic_extra[0]:
        columns[column] = np.concatenate([world_major(e[column]) for e in critic_extra])
    if getattr(settings, "value_clip", None) is not None:
        old = torch.from_numpy(np.concatenate([world_major(t.values) for t in teams]))
        old = critic.normalized(old) if hasattr(critic, "normalized") else old
        columns[OLD_VALUES] = old.numpy()
    length = max_seq_len(critic)
    if length is None:
        columns[Columns.LOSS_MASK] = np.ones(len(columns[Columns.VALUE_TARGETS]), bool)
    else:
        for column in teams[0].critic_state:
            columns[column] = np.concatenate([world_major(t.critic_state[column]) for t in teams])
        keys = [
            np.concatenate([np.full(t.acting.size, k) for k, t in enumerate(teams)]),
            np.concatenate([world_major(np.indices(t.acting.shape)[1]) for t in teams]),
        ]
        steps = np.concatenate([world_major(np.indices(t.acting.shape)[0]) for t in teams])
        resets = np.concatenate([world_major(critic_resets(t.block)) for t in teams])
        columns = module_sequences(columns, segment_starts(keys, steps, resets), length)
    return module_tensors(columns, device)


def module_tensors(columns: dict[str, Any], device) -> dict[str, Any]:
    """Numpy actor columns as the learner's tensors (float64 -> float32; a mask column
    joins the observations as a masked observation), with an all-true loss mask unless
    the columns carry one (a recurrent module's sequences: also their state and
    ``seq_lens``)."""
    masks = columns.pop(ACTION_MASK_KEY, None)
    state = columns.pop(Columns.STATE_IN, None)
    out = {}
    for column, array in columns.items():
        dtype = np.float32 if array.dtype == np.float64 else None
        out[column] = numpy_tensor(array, device, dtype)
    if masks is not None:
        out[Columns.OBS] = {
            OBSERVATION_KEY: out[Columns.OBS],
            ACTION_MASK_KEY: numpy_tensor(masks, device, np.float32),
        }
    if state is not None:
        out[Columns.STATE_IN] = tree.map_structure(lambda s: numpy_tensor(s, device), state)
    if Columns.LOSS_MASK not in out:
        out[Columns.LOSS_MASK] = torch.ones(len(out[Columns.ACTIONS]), dtype=torch.bool).to(device)
    return out
