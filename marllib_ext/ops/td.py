"""Temporal-difference math shared by every replay learner (joint Q-learning and the
DDPG family), pure torch.

Shapes: ``B`` sequences of ``L`` team steps (``L = 1`` for single transitions), ``n``
agents; ``mask (B, L)`` marks real steps (padding after an episode's end is 0).
A truncated (time-limit) end is not terminal: its target bootstraps.
"""

from __future__ import annotations

import torch


def td_targets(
    rewards: torch.Tensor, terminateds: torch.Tensor, next_values: torch.Tensor, gamma: float
) -> torch.Tensor:
    """``y = r + gamma * (1 - terminated) * next_values``, elementwise, no gradient."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    with torch.no_grad():
        return rewards + gamma * (1.0 - terminateds.float()) * next_values


def n_step_returns(
    rewards: torch.Tensor, terminateds: torch.Tensor, mask: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The n-step return of windows of ``L`` steps from each row's first step, cut at
    the episode's end (``mask``, a prefix of each row), no gradient::

        m      = sum_k mask_k                                  real steps of the window
        G      = sum_{k < m} gamma^k r_k
        disc   = gamma^m (1 - terminated_{m-1})                 the bootstrap's discount
        y      = G + disc * V(s_{t+m})

    ``rewards (B, L[, n])`` (per agent where given), ``terminateds``, ``mask (B, L)``.
    Returns ``(G (B[, n]), disc (B,), m (B,) int64)``: observation row ``m`` of the
    window is the bootstrap state (an episode's final row where it ended). ``L = 1``
    gives ``td_targets``'s terms."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    with torch.no_grad():
        real = mask.float()
        powers = gamma ** torch.arange(real.shape[1], dtype=real.dtype, device=real.device)
        weights = real * powers  # (B, L)
        if rewards.dim() == 3:
            returns = (rewards * weights[..., None]).sum(1)
        else:
            returns = (rewards * weights).sum(1)
        steps = real.sum(1).long().clamp(min=1)
        last_terminated = terminateds.float().gather(1, (steps - 1)[:, None])[:, 0]
        discounts = gamma ** steps.to(real.dtype) * (1.0 - last_terminated)
        return returns, discounts, steps


def episode_last_steps(mask: torch.Tensor) -> torch.Tensor:
    """1 at the last real step of every row of whole episodes, else 0: the
    ``terminated`` flags of a learner that takes every episode end as terminal, a
    step limit included (EPyMARL's runner on LBF, whose wrapper reports no
    ``episode_limit``).

    ``mask (B, L)``: real steps, a prefix of each row (``mask[b, t] = 1`` for ``t <
    length_b``). Returns ``(B, L)`` float; a row with no real step is all 0."""
    real = mask.float()
    following = torch.cat([real[:, 1:], torch.zeros_like(real[:, :1])], dim=1)
    return real * (1.0 - following)


def td_lambda_targets(
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    next_values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lambda_: float,
) -> torch.Tensor:
    """λ-returns over whole episodes (the forward view of pymarl2's
    ``build_td_lambda_targets``), no gradient::

        G_t = r_t + gamma * (1 - term_t) * ((1 - lambda_) * Q_{t+1} + lambda_ * G_{t+1})
              where step t + 1 is real (``mask``),
        G_t = r_t + gamma * (1 - term_t) * Q_{t+1}
              at the last real step (the episode ended, was truncated or the agent is
              absent next: it bootstraps fully on ``Q_{t+1}``).

    ``lambda_ = 0`` gives ``td_targets``; ``lambda_ = 1`` the discounted return
    bootstrapped at the last real step. Padding rows get 0.

    Args:
        rewards, terminateds, next_values: ``(B, L)`` or ``(B, L, n)``; ``next_values[t]``
            is the target network's ``Q_{t+1}`` (``Q_tot``, or an agent's own).
        mask: the same shape, real steps (an agent's acting steps for per-agent rows).

    Returns:
        ``(B, L)`` or ``(B, L, n)`` float targets.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"lambda_ must be in [0, 1], got {lambda_}")
    with torch.no_grad():
        real = mask.float()
        going = gamma * (1.0 - terminateds.float())
        next_real = torch.cat([real[:, 1:], torch.zeros_like(real[:, :1])], dim=1)
        # G_t = offset_t + factor_t * G_{t+1}, over time (dim 1).
        offset = real * (rewards + going * (1.0 - lambda_ * next_real) * next_values)
        factor = real * going * lambda_ * next_real
        returns = backward_linear_recurrence(offset.movedim(1, -1), factor.movedim(1, -1))
        return returns.movedim(-1, 1).to(torch.float32)


def backward_linear_recurrence(
    offset: torch.Tensor, factor: torch.Tensor, chunk: int = 32
) -> torch.Tensor:
    """``x_t = offset_t + factor_t * x_{t+1}`` with ``x_T = 0``, over the last dim, in
    blocks of ``chunk`` steps instead of one step at a time (a GPU runs a handful of
    kernels per block, not several per step)::

        x_t = sum_{k=t}^{e-1} (prod_{j=t}^{k-1} factor_j) offset_k
              + (prod_{j=t}^{e-1} factor_j) x_e        for t in a block [s, e).

    ``offset``, ``factor``: ``(..., T)``; returns ``(..., T)``. Memory ``(..., chunk,
    chunk)`` per block."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    out = torch.empty_like(offset)
    carry = torch.zeros_like(offset[..., 0])  # x_e
    length = offset.shape[-1]
    for end in range(length, 0, -chunk):
        start = max(0, end - chunk)
        size = end - start
        block = factor[..., start:end]
        upper = torch.ones(size, size, dtype=torch.bool, device=offset.device).triu()
        # products[t, k] = prod_{j=t}^{k} factor_j for k >= t (1 below the diagonal)
        rows = torch.where(upper, block.unsqueeze(-2), torch.ones_like(block).unsqueeze(-2))
        products = torch.cumprod(rows, dim=-1)
        weights = torch.cat([torch.ones_like(products[..., :1]), products[..., :-1]], dim=-1)
        weights = weights * upper  # prod_{j=t}^{k-1} factor_j for k >= t, else 0
        values = (weights * offset[..., start:end].unsqueeze(-2)).sum(-1)
        out[..., start:end] = values + products[..., -1] * carry.unsqueeze(-1)
        carry = out[..., start]
    return out


def masked_td_loss(
    values: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """``sum(w * mask * (values - sg(targets))^2) / sum(mask)``.

    ``values``, ``targets`` ``(B, L)`` or ``(B, L, n)``; ``mask (B, L)`` marks real steps
    (padding after an episode's end is 0); ``weights (B,)`` importance weights of the
    sampled sequences (1 without prioritized replay). An all-padding batch gives 0."""
    error = values - targets.detach()
    mask = mask.float()
    if error.dim() == mask.dim() + 1:  # per-agent values (IQL)
        mask = mask.unsqueeze(-1).expand_as(error)
    if error.shape != mask.shape:
        raise ValueError(f"values {tuple(error.shape)} and mask {tuple(mask.shape)} differ")
    squared = error.square() * mask
    if weights is not None:
        squared = squared * weights.view(-1, *([1] * (squared.dim() - 1)))
    return squared.sum() / mask.sum().clamp(min=1.0)


def standardized_rewards(
    rewards: torch.Tensor, mask: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    """MARLlib's ``reward_standardize``: ``(r - mean) / (std + eps)`` over the batch's
    real steps; padding stays 0. ``rewards (B, L[, n])``, ``mask (B, L)``."""
    mask = mask.float()
    if rewards.dim() == mask.dim() + 1:
        mask = mask.unsqueeze(-1).expand_as(rewards)
    count = mask.sum().clamp(min=1.0)
    mean = (rewards * mask).sum() / count
    var = ((rewards - mean).square() * mask).sum() / count
    return (rewards - mean) / (var.sqrt() + eps) * mask


def moment_standardized_rewards(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    eps: float = 1e-8,
) -> torch.Tensor:
    """EPyMARL's ``standardise_rewards``: ``(r - mean) / sqrt(var + eps)`` with the
    running moments ``mean``, ``var`` (scalars, or broadcastable) of every reward trained
    on so far, this batch's included; padding stays 0. ``rewards (B, L[, n])``,
    ``mask (B, L)``."""
    mask = mask.float()
    if rewards.dim() == mask.dim() + 1:
        mask = mask.unsqueeze(-1)
    return (rewards - mean) / torch.sqrt(var + eps) * mask


def common_rewards(rewards: torch.Tensor, teams: list[list[int]]) -> torch.Tensor:
    """EPyMARL's ``common_reward`` with ``reward_scalarisation: sum``: every agent's
    reward replaced by its team's sum, ``r'_{t,i} = sum_{j in team(i)} r_{t,j}``.
    ``rewards (..., n)`` -> ``(..., n)``; an agent in no team keeps its own reward."""
    common = rewards.clone()
    for index in teams:
        common[..., index] = rewards[..., index].sum(dim=-1, keepdim=True)
    return common


def team_sum(values: torch.Tensor, agent_index: list[int]) -> torch.Tensor:
    """``sum_{i in team} values[..., i]``: ``(..., n)`` -> ``(...)`` over the team's agents."""
    return values[..., agent_index].sum(dim=-1)


def merge_moments(
    mean: torch.Tensor,
    var: torch.Tensor,
    count: float,
    batch: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Running per-feature mean and (population) variance after adding ``batch (N, d)``
    to ``count`` earlier rows with moments ``mean (d,)``, ``var (d,)`` (Chan et al.'s
    parallel update)::

        n = count + N,  delta = mean_b - mean
        mean' = mean + delta * N / n
        var'  = (var * count + var_b * N + delta^2 * count * N / n) / n

    Equal to the moments of all rows at once. Returns ``(mean', var', n)``."""
    if batch.dim() != 2 or batch.shape[1] != mean.shape[0]:
        raise ValueError(f"batch has shape {tuple(batch.shape)}, expected (N, {mean.shape[0]})")
    n_batch = batch.shape[0]
    if n_batch == 0:
        return mean, var, count
    batch_mean = batch.mean(0)
    batch_var = batch.var(0, unbiased=False)
    total = count + n_batch
    delta = batch_mean - mean
    new_mean = mean + delta * (n_batch / total)
    new_var = (
        var * count + batch_var * n_batch + delta.square() * (count * n_batch / total)
    ) / total
    return new_mean, new_var, float(total)
