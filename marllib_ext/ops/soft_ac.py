"""Soft actor-critic math for teams (``masac``, ``hasac``), pure torch.

Shapes: ``B`` team transitions, ``n`` agents, ``a`` action size (continuous), ``A``
actions of one agent (discrete); ``mask (B, ...)`` marks the rows that count.

Squashed Gaussian policy (SAC, Haarnoja et al. 2018, appendix C), ``h = (high - low)/2``::

    u = mu + sigma * eps,   action = low + (tanh(u) + 1) * h
    log pi(action | o) = sum_d [log N(u_d; mu_d, sigma_d) - log(1 - tanh(u_d)^2) - log h_d]

with ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` (no cancellation).

Soft TD target on the team reward, twin target critics (clipped double Q), each agent
its own temperature ``alpha_i``; the actions ``a'_i ~ pi_i(.|o'_i)`` of the current
policies::

    y = r + gamma (1 - d) [min(Q'_1, Q'_2)(s', a'_1..a'_n) - sum_i alpha_i log pi_i(a'_i|o'_i)]

(with ``n_step`` HARL's n-step form: ``r`` the discounted sum of the window's rewards,
``gamma (1 - d)`` its ``gamma^m (1 - d)``, ``s'`` the state ``m`` steps on.)

(HARL's HASAC takes one team temperature on the joint log-probability, ``alpha_i =
alpha`` for every i.) Actor objective (minimized; the critic held fixed), continuous
with the reparameterized action ``a~_i``, discrete as the expectation over the agent's
own actions (SAC-Discrete, Christodoulou 2019) with ``p = pi_i(.|o_i)`` and ``Q_a`` the
critic with the agent's action set to ``a``::

    continuous  alpha_i log pi_i(a~_i|o_i) - min(Q_1, Q_2)(s, a~)
    discrete    sum_a p_a (alpha_i log p_a - min(Q_1, Q_2)_a)

Temperature (SAC v2's automatic tuning), target entropy ``H_i`` (continuous ``-a``,
discrete a share of ``log A``)::

    J(log alpha_i) = -log alpha_i * sg(log pi_i(a~_i|o_i) + H_i)        continuous
                   = -log alpha_i * sg(sum_a p_a log p_a + H_i)          discrete
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from marllib_ext.ops.masks import masked_mean

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SAC's (and HARL's) bounds on the log std
LOG_2 = math.log(2.0)


def squashed_gaussian_sample(
    mean: torch.Tensor,
    log_std: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    standard_noise: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(action, log pi(action))`` of the squashed Gaussian: ``mean``, ``log_std`` and
    ``standard_noise`` ``(..., a)`` (``eps ~ N(0, 1)``; zeros give the mean action),
    ``low``/``high`` ``(a,)``. The action is differentiable in ``mean`` and ``log_std``
    (reparameterization); ``log_prob (...)``."""
    log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
    std = log_std.exp()
    u = mean + std * standard_noise
    half_range = 0.5 * (high - low)
    action = low + (torch.tanh(u) + 1.0) * half_range
    gaussian = -0.5 * standard_noise.square() - log_std - 0.5 * math.log(2.0 * math.pi)
    log_det = 2.0 * (LOG_2 - u - F.softplus(-2.0 * u)) + torch.log(half_range)
    return action, (gaussian - log_det).sum(-1)


def entropy_penalty(log_probs: torch.Tensor, alphas: torch.Tensor, present: torch.Tensor):
    """``sum_i alpha_i log pi_i`` over the agents present: ``log_probs (B, n)``,
    ``alphas (n,)`` (or a scalar), ``present (B, n)`` -> ``(B,)``."""
    return (alphas * log_probs * present).sum(-1)


def soft_td_target(
    returns: torch.Tensor,
    discounts: torch.Tensor,
    next_q: torch.Tensor,
    next_q_twin: torch.Tensor,
    penalty: torch.Tensor,
) -> torch.Tensor:
    """``y = G + disc (min(Q'_1, Q'_2) - penalty)``, all ``(B,)``, no gradient:
    ``G = r`` and ``disc = gamma (1 - d)`` after one step, ``ops.td.n_step_returns``
    after n (``penalty``: ``entropy_penalty`` of the actions at the bootstrap state)."""
    with torch.no_grad():
        return returns + discounts * (torch.minimum(next_q, next_q_twin) - penalty)


def discrete_soft_objective(
    probs: torch.Tensor, log_probs: torch.Tensor, q_values: torch.Tensor, alpha: torch.Tensor
) -> torch.Tensor:
    """``sum_a p_a (alpha log p_a - Q_a)``: the discrete actor's loss per row, the
    expectation over its own actions. ``probs``, ``log_probs``, ``q_values (B, A)``
    (an illegal action has ``p_a = 0``, so it adds nothing); ``alpha`` a scalar ->
    ``(B,)``."""
    return (probs * (alpha * log_probs - q_values)).sum(-1)


def discrete_log_prob_mean(probs: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
    """``sum_a p_a log p_a = -H(p)`` per row, ``(B, A) -> (B,)``: the discrete policy's
    expected log-probability (illegal actions, ``p_a = 0``, add nothing)."""
    return (probs * log_probs).sum(-1)


def continuous_actor_loss(
    log_probs: torch.Tensor, q_values: torch.Tensor, alpha: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``mean(alpha log pi(a~|o) - Q(s, a~))`` over ``mask``: all ``(B,)``, ``alpha`` a
    scalar (held fixed by the caller)."""
    return masked_mean(alpha * log_probs - q_values, mask)


def team_actor_loss(
    q_values: torch.Tensor,
    mask: torch.Tensor,
    log_probs: torch.Tensor,
    alphas: torch.Tensor,
    acted: torch.Tensor,
) -> torch.Tensor:
    """``masac``'s continuous actors together: ``-mean(min Q(s, a~_1..a~_m))`` over
    ``mask (B,)`` plus ``sum_i mean(alpha_i log pi_i(a~_i|o_i))`` over the rows where
    agent i acted. ``q_values (B,)``, ``log_probs``, ``acted (B, m)``, ``alphas (m,)``
    (held fixed by the caller). The value enters once, so each actor's gradient through
    it is its own action's."""
    own = (alphas * log_probs * acted).sum(0) / acted.float().sum(0).clamp(min=1.0)
    return -masked_mean(q_values, mask) + own.sum()


def temperature_loss(
    log_alpha: torch.Tensor,
    log_probs: torch.Tensor,
    target_entropy: float,
    mask: torch.Tensor,
) -> torch.Tensor:
    """``mean(-log_alpha * sg(log pi + H_target))`` over ``mask``: ``log_probs (B,)``
    (a discrete policy's ``discrete_log_prob_mean``), ``log_alpha`` a scalar. Its
    gradient lowers ``alpha`` while the policy's entropy is above the target."""
    return masked_mean(-log_alpha * (log_probs + target_entropy).detach(), mask)
