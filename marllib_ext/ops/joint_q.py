"""Joint Q-learning math (IQL, VDN, QMIX as in PyMARL / MARLlib), pure torch.

Shapes: a batch holds ``B`` sequences of ``L`` team steps (``L = 1`` for single
transitions); ``n`` agents in sorted id order; ``A`` discrete actions. ``q`` is
``(B, L, n, A)`` per-agent action values, ``actions`` ``(B, L, n)``; a mixed value
``Q_tot`` is ``(B, L)``.

The joint double-Q target (Van Hasselt et al. 2016; Rashid et al. 2018)::

    a*_i     = argmax_a Q_i^online(o'_i, a)
    y        = r_team + gamma * (1 - terminated) * mixer_target(Q_i^target(o'_i, a*_i); s')

with ``mixer`` the sum (VDN), the monotonic hypernetwork mixer (QMIX), or none (IQL:
each agent's own ``y_i = r_i + gamma * (1 - terminated) * Q_i^target(o'_i, a*_i)``).
A truncated (time-limit) end is not terminal: it bootstraps from ``o'``. With action
masks (QMIX's ``avail_actions``) ``a*_i`` is the argmax over the actions legal at
``o'_i``, and epsilon-greedy explores uniformly over the legal actions.
"""

from __future__ import annotations

import torch

from marllib_ext.ops.masks import masked_argmax


def chosen_action_values(q: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """``Q_i(o_i, a_i)``: ``q (..., A)`` gathered at integer ``actions (...)`` -> ``(...)``."""
    if q.shape[:-1] != actions.shape:
        raise ValueError(
            f"q has shape {tuple(q.shape)}; actions {tuple(actions.shape)} must match "
            "all but its last dimension"
        )
    return q.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def double_q_next_values(
    next_q_online: torch.Tensor,
    next_q_target: torch.Tensor,
    next_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``Q^target(o', argmax_{a legal} Q^online(o', a))``: both ``(..., A)`` -> ``(...)``.

    The online network picks the action among those ``next_mask (..., A)`` allows (all
    when ``None``), the target network scores it (double Q). An all-zero mask row (a
    padded or absent agent's step) picks action 0; its value is masked out downstream."""
    if next_q_online.shape != next_q_target.shape:
        raise ValueError(
            f"online {tuple(next_q_online.shape)} and target {tuple(next_q_target.shape)} "
            "values must have one shape"
        )
    greedy = masked_argmax(next_q_online, next_mask)
    return chosen_action_values(next_q_target, greedy)


def linear_schedule(t: float, start: float, end: float, steps: float) -> float:
    """``start`` at ``t = 0``, linearly to ``end`` at ``t = steps``, ``end`` after
    (MARLlib's epsilon: 1.0 -> ``final_epsilon`` over ``epsilon_timesteps``)."""
    if steps <= 0:
        return float(end)
    fraction = min(max(float(t), 0.0) / float(steps), 1.0)
    return float(start + fraction * (end - start))


def epsilon_greedy(
    q: torch.Tensor,
    epsilon: float,
    explore_draws: torch.Tensor,
    random_actions: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``argmax_{a legal} q`` except where ``explore_draws < epsilon``, which take
    ``random_actions``. ``q (B, A)``, ``explore_draws (B,)`` uniform in ``[0, 1)``,
    ``random_actions (B,)`` uniform over the legal actions (:func:`random_legal_actions`),
    ``mask (B, A)`` or ``None`` -> ``(B,)`` int64."""
    greedy = masked_argmax(q, mask)
    return torch.where(explore_draws < epsilon, random_actions.long(), greedy)


def random_legal_actions(mask: torch.Tensor, generator: torch.Generator | None = None):
    """One action per row of ``mask (B, A)``, uniform over its legal actions -> ``(B,)``."""
    return torch.multinomial(mask.float(), 1, generator=generator).squeeze(-1)


def action_gaps(q: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The greedy margin ``max_a Q_i(o, a) - max_{a != a*} Q_i(o, a)`` over the legal
    actions: ``q (..., A)``, ``mask (..., A)`` (1 legal) or ``None`` -> ``(...)``.

    How far an agent's best action stands above its second: a target noise larger than
    it flips the greedy choice. NaN where fewer than two actions are legal (no choice)."""
    if mask is not None and mask.shape != q.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)}; it must match q {tuple(q.shape)}")
    legal = torch.ones_like(q, dtype=torch.bool) if mask is None else mask.bool()
    values = q.masked_fill(~legal, float("-inf"))
    top = values.topk(2, dim=-1).values  # (..., 2)
    gap = top[..., 0] - top[..., 1]
    return torch.where(legal.sum(-1) >= 2, gap, torch.full_like(gap, float("nan")))
