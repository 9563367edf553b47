"""HAPPO's sequential-update factor (Kuba et al. 2022, "Trust Region Policy Optimisation
in Multi-Agent Reinforcement Learning"), numpy / torch, no Ray import."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch


def happo_factors(log_ratios: npt.ArrayLike) -> np.ndarray:
    """The factor each agent's surrogate is weighted by, for agents updated in order.

    With agents ``i_1, ..., i_n`` updated one after another and
    ``log_ratios[m, t] = log pi_new_{i_m}(a_t | o_t) - log pi_old_{i_m}(a_t | o_t)`` after
    agent ``i_m``'s update::

        M_{i_1}[t] = 1
        M_{i_m}[t] = prod_{j < m} pi_new_{i_j}(a_t | o_t) / pi_old_{i_j}(a_t | o_t)

    Args:
        log_ratios: ``(n_agents, T)``, rows in update order.

    Returns:
        ``(n_agents, T)``: row ``m`` is ``M_{i_m}`` (an exclusive cumulative product).
    """
    log_ratios = np.asarray(log_ratios, dtype=np.float64)
    if log_ratios.ndim != 2:
        raise ValueError(f"log_ratios must be (n_agents, T), got shape {log_ratios.shape}")
    exclusive = np.cumsum(log_ratios, axis=0) - log_ratios
    return np.exp(exclusive)


def team_row_log_ratio(
    log_ratio: npt.ArrayLike, team_rows: npt.ArrayLike, n_team_rows: int
) -> np.ndarray:
    """``(n_team_rows,)`` sum of one policy's per-row log ratios at each env step.

    A policy shared by a group of agents acts for all of them at an env step; its
    ratio at that step is the product over the group, i.e. the sum of log ratios.
    ``log_ratio`` and ``team_rows`` are ``(n_rows,)``; ``team_rows`` holds each row's env
    step index in ``[0, n_team_rows)``."""
    return np.bincount(
        np.asarray(team_rows, dtype=np.int64),
        weights=np.asarray(log_ratio, dtype=np.float64),
        minlength=n_team_rows,
    )


def happo_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, factor: torch.Tensor, *, clip_param: float
) -> torch.Tensor:
    """Per-sample HAPPO surrogate to maximize::

        min(r * M * A, clip(r, 1 - eps, 1 + eps) * M * A)

    with ``r = pi_new / pi_old`` of this agent and ``M`` its factor (``happo_factors``).
    ``M > 0``, so this equals PPO's clipped surrogate on the advantage ``M * A``; with
    one agent (``M = 1``) it is PPO's. Shapes: all ``(N,)``."""
    weighted = factor.detach() * advantages
    return torch.minimum(
        ratio * weighted, torch.clamp(ratio, 1 - clip_param, 1 + clip_param) * weighted
    )
