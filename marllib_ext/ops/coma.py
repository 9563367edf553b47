"""COMA's counterfactual advantage and critic inputs (Foerster et al. 2018), numpy only."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def counterfactual_advantage(
    q_values: npt.ArrayLike, policy: npt.ArrayLike, actions: npt.ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """``A_i = Q(s, a)[a_i] - sum_a' pi_i(a' | o_i) Q(s, (a_{-i}, a'))``.

    ``q_values[t, i, a']`` is the critic's ``Q(s_t, (a_{-i,t}, a'))``: the value of the
    joint action with agent i's action replaced by ``a'`` and the others' kept.

    Args:
        q_values: ``(T, n_agents, n_actions)``.
        policy: ``(T, n_agents, n_actions)``, each agent's action probabilities.
        actions: ``(T, n_agents)`` int, the taken actions.

    Returns:
        ``(advantages, q_taken)``, both ``(T, n_agents)``.
    """
    q_values = np.asarray(q_values, dtype=np.float64)
    policy = np.asarray(policy, dtype=np.float64)
    actions = np.asarray(actions, dtype=np.int64)
    if q_values.shape != policy.shape or q_values.shape[:2] != actions.shape:
        raise ValueError(
            f"q_values {q_values.shape}, policy {policy.shape} and actions {actions.shape} "
            "must be (T, n_agents, n_actions) and (T, n_agents)"
        )
    q_taken = np.take_along_axis(q_values, actions[..., None], axis=-1)[..., 0]
    baseline = np.sum(policy * q_values, axis=-1)
    return q_taken - baseline, q_taken


def team_q_fill(q_taken: npt.ArrayLike, present: npt.ArrayLike) -> np.ndarray:
    """``q_taken (T, n)`` with each absent agent's entry replaced by the mean over the
    agents present at that step (0 where none is).

    Every agent's ``Q(s, a)[a_i]`` estimates the same team value of the joint action, so
    an agent's TD(lambda) targets bootstrap through the steps where it is absent (dead,
    not arrived, not its turn) on its teammates' estimates."""
    q_taken = np.asarray(q_taken, dtype=np.float64)
    present = np.asarray(present, dtype=bool)
    counts = present.sum(axis=1)
    team = np.where(counts > 0, (q_taken * present).sum(axis=1) / np.maximum(counts, 1), 0.0)
    return np.where(present, q_taken, team[:, None])


def policy_from_logits(logits: npt.ArrayLike) -> np.ndarray:
    """``softmax(logits)`` over the last axis; ``-inf`` logits (padded actions an agent
    does not have) get probability 0. Shape kept."""
    logits = np.asarray(logits, dtype=np.float64)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def critic_inputs(
    states: npt.ArrayLike,
    actions: npt.ArrayLike,
    n_actions: int,
    present: npt.ArrayLike | None = None,
) -> np.ndarray:
    """COMA critic inputs, one per (step, agent i):
    ``[s_t, one_hot(a_{j,t}) for j != i (zeros in slot i), one_hot(i)]``.

    Args:
        states: ``(T, state_dim)``.
        actions: ``(T, n_agents)`` int.
        n_actions: actions per agent.
        present: ``(T, n_agents)`` bool; an absent agent's action slot is zeros (it took
            no action). ``None``: every agent present.

    Returns:
        ``(T, n_agents, state_dim + n_agents * n_actions + n_agents)`` float32.
    """
    states = np.asarray(states, dtype=np.float32)
    actions = np.asarray(actions, dtype=np.int64)
    steps, n_agents = actions.shape
    one_hot = np.eye(n_actions, dtype=np.float32)[actions]  # (T, n, A)
    if present is not None:
        one_hot *= np.asarray(present, dtype=np.float32)[..., None]
    others = np.repeat(one_hot.reshape(steps, 1, n_agents * n_actions), n_agents, axis=1)
    for agent in range(n_agents):  # agent i does not see its own action
        others[:, agent, agent * n_actions : (agent + 1) * n_actions] = 0.0
    agent_id = np.broadcast_to(np.eye(n_agents, dtype=np.float32), (steps, n_agents, n_agents))
    state = np.repeat(states[:, None, :], n_agents, axis=1)
    return np.concatenate([state, others, agent_id], axis=-1)
