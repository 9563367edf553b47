"""Advantage estimators on time-major numpy arrays (no Ray import)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def _check_shape(name: str, array: np.ndarray, expected: tuple[int, ...]) -> None:
    if array.shape != expected:
        raise ValueError(f"{name} has shape {array.shape}, expected {expected}")


def _gae_recursion(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminateds: np.ndarray,
    truncateds: np.ndarray,
    *,
    gamma: float,
    lambda_: float,
) -> np.ndarray:
    """``A_t = delta_t + gamma * lambda_ * (1 - end_t) * A_{t+1}`` backwards over the
    first (time) axis, every other axis at once; arrays of one shape ``(T, ...)``,
    already checked (see :func:`team_gae`)."""
    deltas = rewards + gamma * np.where(terminateds, 0.0, next_values) - values
    # Carry factor into step t from step t+1; zero where a segment ends at t.
    carry = gamma * lambda_ * ~(terminateds | truncateds)
    advantages = np.empty_like(deltas)
    running = np.zeros(deltas.shape[1:])
    for t in range(deltas.shape[0] - 1, -1, -1):
        running = deltas[t] + carry[t] * running
        advantages[t] = running
    return advantages


def team_gae(
    rewards: npt.ArrayLike,
    values: npt.ArrayLike,
    next_values: npt.ArrayLike,
    terminateds: npt.ArrayLike,
    truncateds: npt.ArrayLike,
    *,
    gamma: float,
    lambda_: float,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Generalized advantage estimation on the team reward and one global value.

    With the team reward ``r_t = sum_i rewards[t, i]``::

        delta_t = r_t + gamma * (1 - terminated_t) * next_values[t] - values[t]
        A_t     = delta_t + gamma * lambda_ * (1 - end_t) * A_{t+1}
        end_t   = terminated_t or truncated_t
        value_target_t = A_t + values[t]

    A segment (episode, or episode chunk cut by the sampler) ends where
    ``terminated_t`` or ``truncated_t`` is set. A terminated step does not bootstrap;
    a truncated step bootstraps from ``next_values[t]``, which must then hold V of the
    final observation. The last index always closes the last segment (as if truncated
    unless terminated), so several segments can be concatenated into one call and give
    the same result as one call per segment.

    Args:
        rewards: ``(T, n_agents)`` per-agent extrinsic rewards (summed inside), or
            ``(T,)`` for an already summed team reward.
        values: ``(T,)`` global value ``V(s_t)``.
        next_values: ``(T,)`` ``V(s_{t+1})``; ignored where ``terminated_t``.
        terminateds: ``(T,)`` bool.
        truncateds: ``(T,)`` bool.
        gamma: discount factor.
        lambda_: GAE lambda.

    Returns:
        ``(advantages, value_targets)``, both ``(T,)`` float32.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim == 2:
        rewards = rewards.sum(axis=1)
    if rewards.ndim != 1:
        raise ValueError(f"rewards has shape {rewards.shape}, expected (T, n_agents) or (T,)")
    horizon = rewards.shape[0]
    values = np.asarray(values, dtype=np.float64)
    next_values = np.asarray(next_values, dtype=np.float64)
    terminateds = np.asarray(terminateds, dtype=bool)
    truncateds = np.asarray(truncateds, dtype=bool)
    for name, array in (
        ("values", values),
        ("next_values", next_values),
        ("terminateds", terminateds),
        ("truncateds", truncateds),
    ):
        _check_shape(name, array, (horizon,))

    advantages = _gae_recursion(
        rewards, values, next_values, terminateds, truncateds, gamma=gamma, lambda_=lambda_
    )
    value_targets = advantages + values
    return advantages.astype(np.float32), value_targets.astype(np.float32)


def standardize_valid(
    values: npt.ArrayLike, valid: npt.ArrayLike, *, min_std: float = 1e-4
) -> npt.NDArray[np.float64]:
    """``(values - mean) / max(min_std, std)`` with mean and std over valid rows only.

    Args:
        values: ``(N,)``.
        valid: ``(N,)`` bool; RLlib's artificial bootstrap rows are the invalid ones
            (RLlib's own GAE connector includes them in its statistics).

    Returns:
        ``(N,)``; invalid rows are shifted and scaled the same way.
    """
    values = np.asarray(values, dtype=np.float64)
    valid = np.asarray(valid, dtype=bool)
    _check_shape("valid", valid, values.shape)
    selected = values[valid]
    return (values - selected.mean()) / max(min_std, float(selected.std()))


def block_gae(
    rewards: npt.ArrayLike,
    values: npt.ArrayLike,
    next_values: npt.ArrayLike,
    terminateds: npt.ArrayLike,
    truncateds: npt.ArrayLike,
    *,
    gamma: float,
    lambda_: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """:func:`team_gae` for ``B`` worlds at once, on a ``(T, B)`` rollout block::

        delta[t, b] = r[t, b] + gamma * (1 - terminated[t, b]) * next_values[t, b]
                      - values[t, b]
        A[t, b]     = delta[t, b] + gamma * lambda_ * (1 - end[t, b]) * A[t + 1, b]
        end[t, b]   = terminated[t, b] or truncated[t, b] or t == T - 1

    Each world's column is a sequence of episode segments (a world resets in place
    where its episode ends); ``next_values[t, b]`` is V of the observation after step
    ``t`` (the final one where the episode ended there, else the next step's). The last
    row closes every segment, bootstrapping from ``next_values[T - 1]`` (the sampler's
    cut). Only the time axis is looped over; worlds are vectorized.

    Args:
        rewards, values, next_values: ``(T, B)``.
        terminateds, truncateds: ``(T, B)`` bool.

    Returns:
        ``(advantages, value_targets)``, both ``(T, B)`` float64.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"values has shape {values.shape}, expected (T, B)")
    rewards = np.asarray(rewards, dtype=np.float64)
    next_values = np.asarray(next_values, dtype=np.float64)
    terminateds = np.asarray(terminateds, dtype=bool)
    truncateds = np.asarray(truncateds, dtype=bool)
    for name, array in (
        ("rewards", rewards),
        ("next_values", next_values),
        ("terminateds", terminateds),
        ("truncateds", truncateds),
    ):
        _check_shape(name, array, values.shape)
    advantages = _gae_recursion(
        rewards, values, next_values, terminateds, truncateds, gamma=gamma, lambda_=lambda_
    )
    return advantages, advantages + values


def own_step_gae(
    rewards: npt.ArrayLike,
    values: npt.ArrayLike,
    next_values: npt.ArrayLike,
    present: npt.ArrayLike,
    observed_after: npt.ArrayLike,
    terminated: npt.ArrayLike,
    truncated: npt.ArrayLike,
    died: npt.ArrayLike,
    *,
    gamma: float,
    lambda_: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """GAE of one agent over its own steps, on a ``(T, B)`` rollout block.

    In world ``b`` the agent acts at env steps ``t_0 < t_1 < ...`` (``present``). Own
    step ``j`` spans env steps ``t_j .. s_j``: up to the step before ``t_{j+1}``, or to
    where the episode ends, the agent dies or the block is cut, whichever is first::

        R_j     = sum_{t = t_j}^{s_j} rewards[t]          (rewards between its turns)
        term_j  = died[t] or terminated[t] for some t in the span
        V'_j    = next_values[t'], t' the span's last step with observed_after
                                                 (its observation after the span)
                = V(o_{t_{j+1}})  where there is none and the span runs into t_{j+1}
                = 0               otherwise
        delta_j = R_j + gamma * (1 - term_j) * V'_j - values[t_j]
        A_j     = delta_j + gamma * lambda_ * (1 - end_j) * A_{j+1}
        end_j   = the span does not run into t_{j+1}

    This is RLlib's GAE on the agent's ``SingleAgentEpisode`` (rewards earned while
    it waits are added to its last step, one discount per own step). Where the agent
    acts at every step of an episode (simultaneous moves) it is :func:`block_gae`
    with ``terminateds = terminated | died``. Loops over ``T``, worlds vectorized.

    Args:
        rewards: ``(T, B)`` the agent's rewards where they count (0 elsewhere).
        values: ``(T, B)`` ``V`` of what it acted on (read where ``present``).
        next_values: ``(T, B)`` ``V`` of its observation after each step (read where
            ``observed_after``).
        present, observed_after, terminated, truncated, died: ``(T, B)`` bool.

    Returns:
        ``(advantages, value_targets)``, ``(T, B)`` float64, at the ``present`` rows
        (0 elsewhere).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"values has shape {values.shape}, expected (T, B)")
    arrays = {
        "rewards": np.asarray(rewards, dtype=np.float64),
        "next_values": np.asarray(next_values, dtype=np.float64),
        **{
            name: np.asarray(array, dtype=bool)
            for name, array in (
                ("present", present),
                ("observed_after", observed_after),
                ("terminated", terminated),
                ("truncated", truncated),
                ("died", died),
            )
        },
    }
    for name, array in arrays.items():
        _check_shape(name, array, values.shape)
    present = arrays["present"]
    terminated = arrays["terminated"] | arrays["died"]
    if present.all() and np.all(arrays["observed_after"] | terminated):
        # It acts at every step (simultaneous moves): one span per step, the team GAE.
        return block_gae(
            arrays["rewards"], values, arrays["next_values"], terminated, arrays["truncated"],
            gamma=gamma, lambda_=lambda_,
        )  # fmt: skip
    horizon, worlds = values.shape
    counts = present.sum(axis=0)
    length = int(counts.max(initial=0))
    span_reward = np.zeros((length, worlds))
    span_value = np.zeros((length, worlds))
    span_next = np.zeros((length, worlds))
    span_term = np.zeros((length, worlds), bool)
    span_end = np.zeros((length, worlds), bool)
    has_next = np.zeros((length, worlds), bool)
    step_of = np.zeros((length, worlds), np.int64)
    owner = np.full(worlds, -1)  # each world's open span
    count = np.zeros(worlds, np.int64)
    columns = np.arange(worlds)
    for t in range(horizon):
        acting = present[t]
        # An open span runs into this step: where the agent was not seen after any of
        # its steps, it bootstraps from what it acts on now.
        runs_on = acting & (owner >= 0)
        runs_on[runs_on] &= ~has_next[owner[runs_on], columns[runs_on]]
        span_next[owner[runs_on], columns[runs_on]] = values[t, runs_on]
        owner[acting] = count[acting]
        span_value[count[acting], columns[acting]] = values[t, acting]
        step_of[count[acting], columns[acting]] = t
        count[acting] += 1
        open_ = owner >= 0
        span_reward[owner[open_], columns[open_]] += arrays["rewards"][t, open_]
        seen = open_ & arrays["observed_after"][t]
        span_next[owner[seen], columns[seen]] = arrays["next_values"][t, seen]
        has_next[owner[seen], columns[seen]] = True
        ends_terminal = open_ & (arrays["died"][t] | arrays["terminated"][t])
        span_term[owner[ends_terminal], columns[ends_terminal]] = True
        closes = ends_terminal | (open_ & (arrays["truncated"][t] | (t == horizon - 1)))
        span_end[owner[closes], columns[closes]] = True
        owner[closes] = -1
    valid = np.arange(length)[:, None] < counts[None, :]
    span_end |= ~valid
    span_advantages = _gae_recursion(
        span_reward, span_value, span_next, span_term, span_end, gamma=gamma, lambda_=lambda_
    )
    advantages = np.zeros((horizon, worlds))
    advantages[step_of[valid], np.broadcast_to(columns, valid.shape)[valid]] = span_advantages[
        valid
    ]
    return advantages, np.where(present, advantages + values, 0.0)
