"""Cost-constrained policy optimization (seed 004, SafePO/OmniSafe), pure torch.

Notation: ``J_c`` is the mean episode cost of the latest rollouts, ``d`` the cost limit,
``lam`` the Lagrange multiplier, ``A_r`` / ``A_c`` the (standardized) reward and cost
advantages, ``ratio = pi(a|o) / pi_old(a|o)``, ``KL = KL(pi || pi_ref)`` per sample.

    Lagrangian:   minimize  -lam * (J_c - d)  by Adam on lam, then lam <- clip(lam, 0, upper)
    PID:          lam = max(0, kp * P + I + kd * D), I <- max(0, I + ki * (J_c - d)),
                  P = EMA of (J_c - d), D = max(0, EMA(J_c) now - EMA(J_c) d_delay ago)
    advantage:    A = (A_r - lam * A_c) / (1 + lam)
    CUP coef:     (1 - gamma * lambda_gae) / (1 - gamma)
    CUP step 2:   loss = mean(lam * coef * ratio * A_c + KL(pi || pi_after_step_1))
    FOCOPS:       loss = mean((KL - ratio * A / focops_lam) * 1[KL <= eta])
"""

from __future__ import annotations

import copy
from collections import deque
from typing import Any

import torch


class Lagrange:
    """Lagrange multiplier updated by Adam on ``-lam * (J_c - cost_limit)``.

    The gradient of that loss in ``lam`` is ``-(J_c - d)``: a mean episode cost above the
    limit raises ``lam``, below it lowers ``lam``; after each step ``lam`` is clamped to
    ``[0, upper_bound]`` (no upper clamp when ``upper_bound`` is None). Values come from
    ``configs/algos/_cost.yaml`` and ``_lagrange.yaml`` (SafePO's: init 0.001, lr 0.035).
    """

    def __init__(
        self,
        *,
        cost_limit: float,
        init: float,
        lr: float,
        upper_bound: float | None,
    ) -> None:
        if lr <= 0:
            raise ValueError(f"Lagrange lr must be > 0, got {lr}")
        if upper_bound is not None and upper_bound < 0:
            raise ValueError(f"Lagrange upper_bound must be >= 0, got {upper_bound}")
        self.cost_limit = float(cost_limit)
        self.upper_bound = upper_bound
        self._multiplier = torch.nn.Parameter(torch.tensor(max(float(init), 0.0)))
        self._optimizer = torch.optim.Adam([self._multiplier], lr=lr)

    @property
    def multiplier(self) -> float:
        return float(self._multiplier.detach().clamp_min(0.0))

    def loss(self, mean_episode_cost: float) -> torch.Tensor:
        """``-lam * (J_c - d)``."""
        return -self._multiplier * (float(mean_episode_cost) - self.cost_limit)

    def update(self, mean_episode_cost: float) -> float:
        """One Adam step on :meth:`loss`, then the clamp; returns the new ``lam``."""
        self._optimizer.zero_grad()
        self.loss(mean_episode_cost).backward()
        self._optimizer.step()
        with torch.no_grad():
            self._multiplier.clamp_(0.0, self.upper_bound)
        return self.multiplier

    def get_state(self) -> dict[str, Any]:
        # A copy: Adam's moment tensors would otherwise be shared with a restored copy.
        return {
            "multiplier": float(self._multiplier.detach()),
            "adam": copy.deepcopy(self._optimizer.state_dict()),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self._multiplier.fill_(float(state["multiplier"]))
        self._optimizer.load_state_dict(state["adam"])


class PIDLagrangian:
    """PID-controlled multiplier (Stooke et al. 2020, as in SafePO/OmniSafe).

    Per update with ``delta = J_c - d``::

        I      <- max(0, I + ki * delta)               (I starts at ``init``)
        P      <- a_p * P + (1 - a_p) * delta          (EMA of the error)
        D_cost <- a_d * D_cost + (1 - a_d) * J_c       (EMA of the cost)
        D      =  max(0, D_cost - D_cost from ``d_delay`` updates ago)
        lam    =  min(max(0, kp * P + I + kd * D), penalty_max)

    ``diff_norm`` clamps ``I`` and ``lam`` to [0, 1]; ``sum_norm`` or ``diff_norm`` skip
    the ``penalty_max`` clamp (the multiplier is then used as a normalized weight).
    Values come from ``configs/algos/_pid.yaml`` (SafePO's CPPO-PID ones).
    """

    def __init__(
        self,
        *,
        cost_limit: float,
        kp: float,
        ki: float,
        kd: float,
        d_delay: int,
        delta_p_ema_alpha: float,
        delta_d_ema_alpha: float,
        sum_norm: bool,
        diff_norm: bool,
        penalty_max: float,
        init: float,
    ) -> None:
        if d_delay < 1:
            raise ValueError(f"PID d_delay must be >= 1, got {d_delay}")
        for name, alpha in (
            ("delta_p_ema_alpha", delta_p_ema_alpha),
            ("delta_d_ema_alpha", delta_d_ema_alpha),
        ):
            if not 0.0 <= alpha < 1.0:
                raise ValueError(f"PID {name} must be in [0, 1), got {alpha}")
        self.cost_limit = float(cost_limit)
        self.kp, self.ki, self.kd = float(kp), float(ki), float(kd)
        self.d_delay = int(d_delay)
        self.alpha_p, self.alpha_d = float(delta_p_ema_alpha), float(delta_d_ema_alpha)
        self.sum_norm, self.diff_norm = bool(sum_norm), bool(diff_norm)
        self.penalty_max = float(penalty_max)
        self.integral = float(init)
        self.delta_p = 0.0
        self.cost_d = 0.0
        self.cost_history: deque[float] = deque([0.0], maxlen=self.d_delay)
        self._multiplier = 0.0

    @property
    def multiplier(self) -> float:
        return self._multiplier

    def update(self, mean_episode_cost: float) -> float:
        """One PID step from the latest mean episode cost; returns the new ``lam``."""
        cost = float(mean_episode_cost)
        delta = cost - self.cost_limit
        self.integral = max(0.0, self.integral + self.ki * delta)
        if self.diff_norm:
            self.integral = min(1.0, self.integral)
        self.delta_p = self.alpha_p * self.delta_p + (1.0 - self.alpha_p) * delta
        self.cost_d = self.alpha_d * self.cost_d + (1.0 - self.alpha_d) * cost
        derivative = max(0.0, self.cost_d - self.cost_history[0])
        output = max(0.0, self.kp * self.delta_p + self.integral + self.kd * derivative)
        if self.diff_norm:
            output = min(1.0, output)
        if not (self.diff_norm or self.sum_norm):
            output = min(output, self.penalty_max)
        self._multiplier = output
        self.cost_history.append(self.cost_d)
        return output

    def get_state(self) -> dict[str, Any]:
        return {
            "integral": self.integral,
            "delta_p": self.delta_p,
            "cost_d": self.cost_d,
            "cost_history": list(self.cost_history),
            "multiplier": self._multiplier,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.integral = float(state["integral"])
        self.delta_p = float(state["delta_p"])
        self.cost_d = float(state["cost_d"])
        self.cost_history = deque(state["cost_history"], maxlen=self.d_delay)
        self._multiplier = float(state["multiplier"])


def lagrangian_advantage(
    reward_advantages: torch.Tensor, cost_advantages: torch.Tensor, multiplier: float
) -> torch.Tensor:
    """``(A_r - lam * A_c) / (1 + lam)``, elementwise; any shape, both the same."""
    if reward_advantages.shape != cost_advantages.shape:
        raise ValueError(
            f"advantage shapes differ: {tuple(reward_advantages.shape)} vs "
            f"{tuple(cost_advantages.shape)}"
        )
    if multiplier < 0:
        raise ValueError(f"Lagrange multiplier must be >= 0, got {multiplier}")
    return (reward_advantages - multiplier * cost_advantages) / (1.0 + multiplier)


def cup_coefficient(gamma: float, gae_lambda: float) -> float:
    """CUP's projection weight ``(1 - gamma * lambda) / (1 - gamma)``; needs gamma < 1."""
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"CUP needs gamma in [0, 1), got {gamma}")
    return (1.0 - gamma * gae_lambda) / (1.0 - gamma)


def cup_projection_loss(
    ratio: torch.Tensor,
    cost_advantages: torch.Tensor,
    kl: torch.Tensor,
    *,
    multiplier: float,
    coefficient: float,
) -> torch.Tensor:
    """Per-sample CUP step-2 loss ``lam * coef * ratio * A_c + KL``; shapes ``(B,)``.

    Minimizing it moves probability away from costly actions (``A_c > 0``) while the KL
    to the policy after the reward step keeps the projection small.
    """
    return multiplier * coefficient * ratio * cost_advantages + kl


def focops_loss(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    kl: torch.Tensor,
    *,
    focops_lam: float,
    focops_eta: float,
) -> torch.Tensor:
    """Per-sample FOCOPS loss ``(KL - ratio * A / focops_lam) * 1[KL <= eta]``; ``(B,)``.

    ``A`` is the Lagrangian advantage; samples whose (detached) KL exceeds ``eta`` get
    zero loss and zero gradient.
    """
    if focops_lam <= 0:
        raise ValueError(f"focops_lam must be > 0, got {focops_lam}")
    inside = (kl.detach() <= focops_eta).to(kl.dtype)
    return (kl - ratio * advantages / focops_lam) * inside
