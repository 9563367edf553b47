"""COMA's train batch from ``(T, B)`` rollout blocks (a batched runner's, or episode
chunks read as blocks by ``rollout.episode_blocks``).

Per step ``(t, b)`` and team agent ``i`` (the block's agent order): the taken actions,
``pi_i`` from the logged action-distribution inputs and ``Q = critic(
ops.coma.critic_inputs)``. Agent ``i``'s rows get its counterfactual advantage
``Q[a_i] - sum_a' pi_i(a') Q[a']``, standardized over every agent's acting rows. The
critic's targets per agent are TD(lambda) returns of the team reward on ``Q_taken``
(absent agents' entries: the present agents' mean, ``ops.coma.team_q_fill``),
bootstrapped where the sampler cut a world or the env truncated its episode on the
baseline ``sum_a' pi_i Q(s', (a_{-i}, a'))`` of the state after the step, with the
step's own actions and policy (the next ones were not sampled)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns

from marllib_ext.ops.advantages import block_gae, standardize_valid
from marllib_ext.ops.coma import (
    counterfactual_advantage,
    critic_inputs,
    policy_from_logits,
    team_q_fill,
)
from marllib_ext.policies.coma_critic import COMA_INPUTS
from marllib_ext.postprocessing.block_batch import (
    episode_major,
    module_tensors,
    present_rewards,
    row_keys,
    team_agents,
    world_major,
)
from marllib_ext.postprocessing.sequence_batch import EPISODE_START, episode_starts
from marllib_ext.rllib_compat import plain_module

COMA_ADVANTAGE_MEAN = "coma_advantage_mean"
COMA_ADVANTAGE_STD = "coma_advantage_std"
COMA_Q_TAKEN_MEAN = "coma_q_taken_mean"


def _q_values(critic, states, actions, present, n_actions: int, device) -> np.ndarray:
    """``(rows, n, A)`` Q of ``(rows, d)`` states with ``(rows, n)`` actions, and the
    critic's inputs ``(rows, n, input_dim)``."""
    inputs = critic_inputs(states, actions, n_actions, present)
    flat = torch.from_numpy(inputs.reshape(-1, inputs.shape[-1])).to(device)
    with torch.no_grad():
        q = critic.q_values(flat).cpu().numpy().astype(np.float64)
    return q.reshape(*actions.shape, n_actions), inputs


class _TeamArrays:
    """One block's COMA arrays for the team's agents, ``(T, B, n, ...)``."""

    def __init__(self, block, team: list[int], critic, n_actions: int, *, gamma, lambda_, device):
        self.block, self.team = block, team
        agents = [block.agents[i] for i in team]
        horizon, worlds = block.terminated.shape
        n = len(team)
        self.present = block.alive[:, :, team]
        self.actions = np.stack([block.actions[a] for a in agents], -1).astype(np.int64)
        logits = np.full((horizon, worlds, n, n_actions), -np.inf)
        for j, agent in enumerate(agents):
            agent_logits = block.outputs[agent][Columns.ACTION_DIST_INPUTS]
            logits[:, :, j, : agent_logits.shape[-1]] = agent_logits
        policy = policy_from_logits(logits).reshape(-1, n, n_actions)
        actions = self.actions.reshape(-1, n)
        present = self.present.reshape(-1, n)
        q, inputs = _q_values(
            critic, block.states.reshape(horizon * worlds, -1), actions, present, n_actions, device
        )
        advantages, q_taken = counterfactual_advantage(q, policy, actions)
        self.advantages = advantages.reshape(horizon, worlds, n)
        self.q_taken = q_taken.reshape(horizon, worlds, n)
        self.inputs = inputs.reshape(horizon, worlds, n, -1)
        values = team_q_fill(q_taken, present).reshape(horizon, worlds, n)
        # V after each step: the next row's where the episode goes on; the baseline of
        # the state after the step where the sampler cut or the env truncated it.
        next_values = np.zeros_like(values)
        next_values[:-1] = values[1:]
        cut = block.truncated.copy()
        cut[-1] = ~block.terminated[-1]
        steps, envs = np.nonzero(cut)
        if len(steps):
            after = block.present_after()[:, :, team][steps, envs]
            q_after, _ = _q_values(
                critic, block.next_states[steps, envs], self.actions[steps, envs], after,
                n_actions, device,
            )  # fmt: skip
            policy_rows = policy.reshape(horizon, worlds, n, n_actions)[steps, envs]
            adv_after, q_taken_after = counterfactual_advantage(
                q_after, policy_rows, self.actions[steps, envs]
            )
            next_values[steps, envs] = team_q_fill(q_taken_after - adv_after, after)
        rewards = present_rewards(block, team).sum(-1)
        self.targets = np.stack(
            [
                block_gae(
                    rewards, values[:, :, j], next_values[:, :, j], block.terminated,
                    block.truncated, gamma=gamma, lambda_=lambda_,
                )[1]
                for j in range(n)
            ],
            axis=-1,
        )  # fmt: skip


def coma_block_batch(
    blocks: list, *, connector, rl_module, device, metrics=None
) -> dict[str, dict[str, Any]]:
    """``{module_id: {column: tensor}}`` of COMA's actors and critic (see the module's
    docstring); ``connector``: the ``COMAAdvantageConnector`` (critic id, team,
    ``gamma``, ``lambda_``)."""
    critic_id = connector.critic_module_id
    critic = plain_module(rl_module, critic_id)
    n_actions = int(critic.model_config["n_actions"])
    teams = []
    for block in blocks:
        team = team_agents(block, connector.actor_module_ids)
        expected = critic.model_config["input_dim"] - block.states.shape[-1]
        if len(team) * (n_actions + 1) != expected:
            raise ValueError(
                f"COMA's critic {critic_id!r} was built for another number of agents than "
                f"the {len(team)} of this sample ({[block.agents[i] for i in team]})"
            )
        teams.append(
            _TeamArrays(
                block, team, critic, n_actions, gamma=connector.gamma,
                lambda_=connector.lambda_, device=device,
            )
        )  # fmt: skip
    present = np.concatenate([t.present.ravel() for t in teams])
    raw = np.concatenate([t.advantages.ravel() for t in teams])
    standardized = np.where(present, standardize_valid(raw, present), 0.0)
    if metrics is not None:
        q_taken = np.concatenate([t.q_taken.ravel() for t in teams])
        metrics.log_dict(
            {
                COMA_ADVANTAGE_MEAN: float(raw[present].mean()),
                COMA_ADVANTAGE_STD: float(raw[present].std()),
                COMA_Q_TAKEN_MEAN: float(q_taken[present].mean()),
            },
            key=critic_id,
            window=1,
        )
    splits = np.cumsum([t.present.size for t in teams])[:-1]
    parts: dict[str, dict[str, list]] = {}
    keys: dict[str, list] = {}
    for k, (team, advantages) in enumerate(zip(teams, np.split(standardized, splits), strict=True)):
        advantages = advantages.reshape(team.present.shape)
        block = team.block
        for j, i in enumerate(team.team):
            agent = block.agents[i]
            module_id = block.module_of[agent]
            rows = block.alive[:, :, i]
            columns = {
                Columns.OBS: block.observations[agent][rows],
                Columns.ACTIONS: block.actions[agent][rows],
                Columns.ADVANTAGES: advantages[:, :, j][rows],
                Columns.VALUE_TARGETS: team.targets[:, :, j][rows],
                **{key: v[rows] for key, v in block.outputs[agent].items()},
                EPISODE_START: episode_starts(block)[rows],
            }
            for column, array in columns.items():
                parts.setdefault(module_id, {}).setdefault(column, []).append(array)
            keys.setdefault(module_id, []).append(row_keys(k, i, rows))
    batch = {}
    for module_id, columns in parts.items():
        joined = {column: np.concatenate(arrays) for column, arrays in columns.items()}
        order = [np.concatenate(key) for key in zip(*keys[module_id], strict=True)]
        actor = plain_module(rl_module, module_id) if module_id in rl_module else None
        batch[module_id] = module_tensors(episode_major(joined, order, actor), device)

    def critic_column(name, dtype=None):
        arrays = [world_major(getattr(t, name)) for t in teams]
        flat = np.concatenate([a.reshape(-1, *a.shape[2:]) for a in arrays])
        return torch.from_numpy(np.ascontiguousarray(flat, dtype=dtype)).to(device)

    batch[critic_id] = {
        COMA_INPUTS: critic_column("inputs", np.float32),
        Columns.ACTIONS: critic_column("actions"),
        Columns.VALUE_TARGETS: critic_column("targets", np.float32),
        Columns.LOSS_MASK: critic_column("present"),
    }
    return batch
