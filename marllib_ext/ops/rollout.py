"""Pure array functions of a batched rollout block (``rollout.ArrayRollout``): where each
world's episode pieces lie in a ``(T, B)`` block, a team's cost at each step, and the
env-bound actions RLlib's ``NormalizeAndClipActions`` would make, for a whole batch at
once."""

from __future__ import annotations

import numpy as np


def episode_pieces(ended: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The episode pieces of a rollout block, one per (world, episode) it touches.

    ``ended[t, b]`` is true when world ``b``'s episode ended at step ``t`` (terminated or
    truncated; the world restarts at ``t + 1``). Piece ``i`` covers steps
    ``start[i] .. stop[i] - 1`` of world ``world[i]``; ``done[i]`` says that it ends its
    episode (``ended[stop[i] - 1, world[i]]``). A block that stops right where an episode
    ended has no empty piece after it.

    Args:
        ended: ``(T, B)`` bool.

    Returns:
        ``(world, start, stop, done)``: four ``(P,)`` arrays ordered by world, then time.
    """
    ended = np.asarray(ended, dtype=bool)
    if ended.ndim != 2:
        raise ValueError(f"ended must be (T, B), got shape {ended.shape}")
    horizon, num_worlds = ended.shape
    # Pieces that end an episode: one per ended step, in (world, time) order.
    end_worlds, end_steps = np.nonzero(ended.T)
    end_stops = end_steps + 1
    end_starts = np.zeros_like(end_stops)
    same_world = end_worlds[1:] == end_worlds[:-1]
    end_starts[1:][same_world] = end_stops[:-1][same_world]
    # The last, unfinished piece of every world whose block does not stop at an end.
    last_stop = np.zeros(num_worlds, dtype=np.int64)
    last_stop[end_worlds] = end_stops  # later (larger) stops overwrite earlier ones
    tail_worlds = np.flatnonzero(last_stop < horizon)
    world = np.concatenate([end_worlds, tail_worlds]).astype(np.int64)
    start = np.concatenate([end_starts, last_stop[tail_worlds]]).astype(np.int64)
    stop = np.concatenate([end_stops, np.full(len(tail_worlds), horizon)]).astype(np.int64)
    done = np.concatenate([np.ones(len(end_worlds), bool), np.zeros(len(tail_worlds), bool)])
    order = np.lexsort((start, world))
    return world[order], start[order], stop[order], done[order]


def team_step_costs(
    team_costs: np.ndarray, observed: np.ndarray, members: np.ndarray
) -> np.ndarray:
    """Each step's cost of one team: what the team's agents reported after the step.

    The env adapter hands every agent its team's summed cost with its observation after
    a step (``info["team_cost"]``), so the members observed there report the same
    value::

        cost[t, b] = team_costs[t, b, j]  for the first j in members with observed[t, b, j]
                   = 0                   where no member was observed after step t

    Args:
        team_costs: ``(T, B, n_agents)`` each agent's reported team cost.
        observed: ``(T, B, n_agents)`` bool, the agent was handed an observation (and
            its info) after step ``t`` (``RolloutBlock.observed_after``).
        members: ``(m,)`` the team's agent indices.

    Returns:
        ``(T, B)`` float64.
    """
    members = np.asarray(members, dtype=np.int64)
    seen = np.asarray(observed, dtype=bool)[..., members]
    costs = np.asarray(team_costs, dtype=np.float64)[..., members]
    if costs.shape[-1] == 0:
        return np.zeros(costs.shape[:-1])
    first = seen.argmax(axis=-1)
    value = np.take_along_axis(costs, first[..., None], axis=-1)[..., 0]
    return np.where(seen.any(axis=-1), value, 0.0)


def unsquash_actions(actions: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Policy outputs in ``[-1, 1]`` mapped onto a bounded Box, then clipped:
    ``clip(low + (a + 1) (high - low) / 2, low, high)``.

    Args:
        actions: ``(N, *shape)`` float.
        low, high: ``shape`` bounds of the Box.

    Returns:
        ``(N, *shape)``, the same as RLlib's ``unsquash_action`` on each row.
    """
    return np.clip(low + (actions + 1.0) * (high - low) / 2.0, low, high)


def clip_actions(actions: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``clip(a, low, high)`` on every row of ``(N, *shape)`` actions (``shape`` bounds)."""
    return np.clip(actions, low, high)
