"""Deterministic actor-critic math (IDDPG, MADDPG, FACMAC), pure torch.

Shapes: ``B`` team transitions, ``n`` agents (sorted id order), ``a`` action size.
Critic targets use ``ops.td.td_targets`` with the target actors' actions::

    IDDPG   y_i = r_i    + gamma (1 - d) Q'_i(o'_i, mu'_i(o'_i))
    MADDPG  y_i = r_team + gamma (1 - d) Q'_i(s', mu'_1(o'_1), ..., mu'_n(o'_n))
    FACMAC  y   = r_team + gamma (1 - d) mixer'(Q'_1(o'_1, mu'_1(o'_1)), ...; s')

Actor objectives (maximized; the critics are held fixed)::

    IDDPG   Q_i(o_i, mu_i(o_i))
    MADDPG  Q_i(s, a_1, ..., mu_i(o_i), ..., a_n)    others' actions from the batch
    FACMAC  mixer(Q_1(o_1, mu_1(o_1)), ..., Q_n(o_n, mu_n(o_n)); s)   every current action

TD3's two fixes of the overestimation loop (RLlib's and MARLlib's DDPG options
``smooth_target_policy`` and ``twin_q``): the target actions ``mu'(o')`` are replaced by
``smoothed_target_actions``, and with twin critics every ``Q'`` above is the minimum of
the two target critics' values (FACMAC: of the two target mixers' ``Q_tot``).
"""

from __future__ import annotations

import torch

from marllib_ext.ops.masks import masked_mean


def squash_to_bounds(raw: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """``low + (tanh(raw) + 1) / 2 * (high - low)``: an unbounded output into the box."""
    return low + (torch.tanh(raw) + 1.0) * 0.5 * (high - low)


def gaussian_exploration(
    actions: torch.Tensor,
    noise_scale: float,
    low: torch.Tensor,
    high: torch.Tensor,
    standard_noise: torch.Tensor,
) -> torch.Tensor:
    """``clip(a + noise_scale * (high - low) / 2 * eps, low, high)``, ``eps ~ N(0, 1)``
    given as ``standard_noise`` (same shape as ``actions``)."""
    noisy = actions + noise_scale * 0.5 * (high - low) * standard_noise
    return torch.maximum(torch.minimum(noisy, high), low)


def smoothed_target_actions(
    actions: torch.Tensor,
    noise_scale: float,
    noise_clip: float,
    low: torch.Tensor,
    high: torch.Tensor,
    standard_noise: torch.Tensor,
) -> torch.Tensor:
    """TD3's target policy smoothing, in shares of half the action range ``h``::

        a~' = clip(a' + h * clip(noise_scale * eps, -noise_clip, noise_clip), low, high)

    ``actions`` and ``standard_noise`` (``eps ~ N(0, 1)``) of one shape ``(..., a)``;
    on a ``[-1, 1]`` box ``noise_scale`` 0.2 and ``noise_clip`` 0.5 are TD3's values."""
    half_range = 0.5 * (high - low)
    noise = (noise_scale * standard_noise).clamp(-noise_clip, noise_clip)
    return torch.maximum(torch.minimum(actions + half_range * noise, high), low)


def joint_actions_with_own(
    batch_actions: torch.Tensor, policy_actions: torch.Tensor, agent: int
) -> torch.Tensor:
    """MADDPG's critic input for actor ``agent``: its current policy action, every other
    agent's action from the batch (no gradient). ``(B, n, a)`` each -> ``(B, n, a)``."""
    if batch_actions.shape != policy_actions.shape:
        raise ValueError(
            f"batch actions {tuple(batch_actions.shape)} and policy actions "
            f"{tuple(policy_actions.shape)} must have one shape"
        )
    others = batch_actions.detach()
    own = torch.zeros_like(others[:1, :, :1]).expand_as(others).clone()
    own[:, agent] = 1.0
    return others * (1.0 - own) + policy_actions * own


def deterministic_policy_loss(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``-mean(values)`` over real steps: ascent on the critic's value of the actions.
    ``values (B[, n])``, ``mask (B,)``."""
    if values.dim() == mask.dim() + 1:
        mask = mask.unsqueeze(-1).expand_as(values)
    return -masked_mean(values, mask)
