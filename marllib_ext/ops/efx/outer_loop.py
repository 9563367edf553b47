"""EFXplorer's outer loop on the deployment budget and the test-time budget choice
(seed 000's ``z`` update; DefMARL's z_0 sampling and root finding), pure numpy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def largest_budget_within(
    return_at: Callable[[float], float],
    *,
    z_low: float,
    z_high: float,
    target: float,
    iterations: int = 8,
) -> tuple[float, list[tuple[float, float]]]:
    """Largest ``z`` in ``[z_low, z_high]`` with ``return_at(z) >= target``, by bisection
    (DefMARL picks its test-time budget by root finding on the same kind of curve).

    Assumes ``return_at`` is non-increasing in ``z`` (more exploration demand, less
    extrinsic return) and ``return_at(z_low) >= target``. After ``iterations`` halvings
    the answer is within ``(z_high - z_low) / 2**iterations`` below the true crossing.

    Returns:
        ``(z, evaluations)`` with every ``(z, return)`` pair evaluated, in order.
    """
    evaluations: list[tuple[float, float]] = []

    def evaluate(z: float) -> float:
        value = float(return_at(z))
        evaluations.append((z, value))
        return value

    if evaluate(z_high) >= target:
        return float(z_high), evaluations
    lo, hi = float(z_low), float(z_high)  # invariant: ok at lo (assumed), not ok at hi
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if evaluate(mid) >= target:
            lo = mid
        else:
            hi = mid
    return lo, evaluations


Z_SAMPLING_MODES = ("fixed", "uniform", "defmarl")
Z_OPTIMIZERS = ("sgd", "adam")


BUDGET_RANGES = ("full", "tracked")
FLOOR_RATE = 0.2  # the tracked floor's step toward each iteration's measured return
MIN_DEMAND_RANGE = 0.1  # the demand range never falls below this share of [z_low, z_high]


def sample_initial_budget(
    rng: np.random.Generator,
    mode: str,
    *,
    budget: float,
    z_low: float,
    z_high: float,
    floor: float | None = None,
) -> float:
    """``z_0`` of a new episode.

    ``fixed``: the current budget. ``uniform``: ``U[floor, z_high]``. ``defmarl``: as
    DefMARL samples its budget: ``z_low`` with probability 0.3, ``z_high`` with 0.2,
    else ``U[floor, z_high]``. ``floor`` (default ``z_low``) is the bottom of the range
    where a budget demands more than the team collects without one
    (``budget_range: tracked``); the ``z_low`` draws stay at ``z_low``, where that
    floor is measured.
    """
    floor = z_low if floor is None else min(max(float(floor), z_low), z_high)
    if mode == "fixed":
        return float(budget)
    if mode == "uniform":
        return float(rng.uniform(floor, z_high))
    if mode == "defmarl":
        draw = rng.random()
        if draw < 0.3:
            return float(z_low)
        if draw < 0.5:
            return float(z_high)
        return float(rng.uniform(floor, z_high))
    raise ValueError(f"z_sampling must be one of {Z_SAMPLING_MODES}, got {mode!r}")


class BudgetController:
    """Outer loop of seed 000 on the deployment budget: raise z while the constraints hold.

    After each iteration, with ``J_ext`` / ``J_int`` the mean team extrinsic / intrinsic
    return of that iteration's episodes played at the controller's own z::

        slack = min((J_ext - J_ext_prev) / ext_scale + ext_tolerance,
                    (J_int - z) / (z_high - z_low))
        z    <- clip(z + lr * (z_high - z_low) * step(slack), z_low, z_high)

    Both terms of the slack are on a normalized scale (``ext_scale``: the width of the
    env's declared return range, or 1), so ``lr`` is a fraction of the budget range.
    Where the intrinsic term is the smaller one, the ``sgd`` step is exactly seed 000's
    ``z <- z + lr_z * (J_int - z)``: ``lr`` here is the seed's ``lr_z``. ``step`` is the
    identity (``sgd``) or Adam's bias-corrected ``m / sqrt(v)`` (``adam``, as SafePO's
    Lagrange multiplier), which moves z by about ``lr`` of the range per iteration
    whatever the slack's scale. The first call only records ``J_ext_prev``.

    ``ext_tolerance`` (0: seed 000's rule) is the normalized extrinsic change per
    iteration the budget may cost: with a flat ``J_ext`` (a sparse task before its first
    success) the seed's slack is exactly 0 and z never leaves ``z_low``; a tolerance lets
    it rise while the team still collects its budget.

    ``floor`` (``budget_range: tracked``): the team intrinsic return of episodes played
    at ``z_low`` (no demand), moved by :meth:`track_floor` as
    ``floor <- clip(floor + FLOOR_RATE * (J_int(z_low) - floor), z_low, z_high)``;
    budgets below it ask for nothing the team does not already collect. It starts at
    ``z_low`` and stays there unless tracked.
    """

    def __init__(
        self,
        *,
        z: float,
        z_low: float,
        z_high: float,
        lr: float,
        optimizer: str = "sgd",
        ext_scale: float = 1.0,
        ext_tolerance: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        if optimizer not in Z_OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {Z_OPTIMIZERS}, got {optimizer!r}")
        if z_low > z_high:
            raise ValueError(f"z_low={z_low} must not exceed z_high={z_high}")
        if ext_scale <= 0:
            raise ValueError(f"ext_scale must be > 0, got {ext_scale}")
        if ext_tolerance < 0:
            raise ValueError(f"ext_tolerance must be >= 0, got {ext_tolerance}")
        self.ext_tolerance = float(ext_tolerance)
        self.z = float(min(max(z, z_low), z_high))
        self.z_low, self.z_high, self.lr = float(z_low), float(z_high), float(lr)
        self.optimizer, self.ext_scale, self.betas, self.eps = optimizer, ext_scale, betas, eps
        self.j_ext_prev: float | None = None
        self.first_moment = self.second_moment = 0.0
        self.steps = 0
        self.floor = self.z_low

    @property
    def z_range(self) -> float:
        return self.z_high - self.z_low

    @property
    def demand_range(self) -> float:
        """``max(z_high - floor, MIN_DEMAND_RANGE * (z_high - z_low))``: the budgets that
        demand more than the team collects without a demand (the full range while the
        floor is not tracked)."""
        return max(self.z_high - self.floor, MIN_DEMAND_RANGE * self.z_range)

    def track_floor(self, j_int_at_low: float) -> None:
        """One step of the floor toward ``J_int(z_low)`` (no-op for a non-finite value)."""
        if np.isfinite(j_int_at_low):
            floor = self.floor + FLOOR_RATE * (float(j_int_at_low) - self.floor)
            self.floor = float(min(max(floor, self.z_low), self.z_high))

    def update(self, j_ext: float, j_int: float) -> float | None:
        """One outer step; returns the normalized slack used (None on the first call,
        or when the range is empty)."""
        if self.j_ext_prev is None or not np.isfinite(self.j_ext_prev):
            self.j_ext_prev = float(j_ext)
            return None
        if self.z_range <= 0:
            return None
        slack = min(
            (j_ext - self.j_ext_prev) / self.ext_scale + self.ext_tolerance,
            (j_int - self.z) / self.z_range,
        )
        self.j_ext_prev = float(j_ext)
        if not np.isfinite(slack):
            return None
        step = slack
        if self.optimizer == "adam":
            beta1, beta2 = self.betas
            self.steps += 1
            self.first_moment = beta1 * self.first_moment + (1 - beta1) * slack
            self.second_moment = beta2 * self.second_moment + (1 - beta2) * slack**2
            m_hat = self.first_moment / (1 - beta1**self.steps)
            v_hat = self.second_moment / (1 - beta2**self.steps)
            step = m_hat / (np.sqrt(v_hat) + self.eps)
        z = self.z + self.lr * self.z_range * step
        self.z = float(min(max(z, self.z_low), self.z_high))
        return float(slack)

    def get_state(self) -> dict[str, float | int | None]:
        return {
            "z": self.z,
            "j_ext_prev": self.j_ext_prev,
            "first_moment": self.first_moment,
            "second_moment": self.second_moment,
            "steps": self.steps,
            "floor": self.floor,
        }

    def set_state(self, state: dict) -> None:
        self.z = float(state["z"])
        self.j_ext_prev = state["j_ext_prev"]
        self.first_moment = float(state["first_moment"])
        self.second_moment = float(state["second_moment"])
        self.steps = int(state["steps"])
        self.floor = float(state.get("floor", self.z_low))  # older checkpoints: no floor
