"""The trust-region policy step (TRPO, Schulman et al. 2015; per agent in HATRPO, Kuba
et al. 2022): Fisher-vector products by double backprop of the mean KL, conjugate
gradient, the largest step inside the KL ball and a backtracking line search. torch,
no Ray import.

One step, with ``g`` the surrogate's gradient and ``F`` the Fisher matrix (the Hessian
of the mean KL at the current policy)::

    s = CG(F + damping I, g)                       # s ~ F^-1 g
    beta = sqrt(2 delta / s^T F s)                 # 0.5 (beta s)^T F (beta s) = delta
    theta = theta_old + c^k beta s, k = 0, 1, ...  # the first k the line search accepts
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


def flat(tensors: Sequence[torch.Tensor | None], like: Sequence[torch.Tensor]) -> torch.Tensor:
    """``tensors`` (``None``: zeros shaped as the matching ``like``) as one flat vector."""
    return torch.cat(
        [
            (torch.zeros_like(p) if t is None else t).reshape(-1)
            for t, p in zip(tensors, like, strict=True)
        ]
    )


def flat_params(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """A copy of ``params`` as one flat vector (a copy: later in-place writes to the
    parameters leave it unchanged, so it can restore them)."""
    return torch.cat([p.detach().reshape(-1) for p in params]).clone()


def set_flat_params(params: Sequence[torch.Tensor], vector: torch.Tensor) -> None:
    """Writes ``vector`` (as laid out by ``flat_params``) into ``params`` in place."""
    total = sum(p.numel() for p in params)
    if total != vector.numel():
        raise ValueError(f"vector has {vector.numel()} entries, the parameters {total}")
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vector[offset : offset + n].view_as(p))
            offset += n


def fisher_vector_product(
    mean_kl: torch.Tensor, params: Sequence[torch.Tensor], damping: float
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``v -> (F + damping I) v`` with ``F`` the Hessian of ``mean_kl`` in ``params``.

    ``mean_kl``: the mean over samples of ``KL(pi_old || pi_theta)`` with ``pi_old``
    detached, evaluated at ``theta = theta_old`` (where its gradient is 0 and its
    Hessian is the Fisher information matrix). By double backprop::

        F v = d/dtheta [ (d mean_kl / d theta)^T v ]

    The first gradient is taken once (with its graph) and reused for every ``v``, as
    conjugate gradient calls this ``iterations`` times. ``v``: ``(n_params,)``.
    """
    params = list(params)
    grads = torch.autograd.grad(mean_kl, params, create_graph=True, allow_unused=True)
    kl_grad = flat(grads, params)

    def product(vector: torch.Tensor) -> torch.Tensor:
        hessian_vector = torch.autograd.grad(
            (kl_grad * vector.detach()).sum(), params, retain_graph=True, allow_unused=True
        )
        return flat(hessian_vector, params).detach() + damping * vector

    return product


def conjugate_gradient(
    matrix_vector: Callable[[torch.Tensor], torch.Tensor],
    b: torch.Tensor,
    iterations: int,
    residual_tol: float = 1e-10,
) -> torch.Tensor:
    """``x ~ A^-1 b`` for a symmetric positive definite ``A`` given as ``v -> A v``.

    Conjugate gradient from ``x = 0``: at most ``iterations`` products, stopping once
    the squared residual ``|b - A x|^2`` is below ``residual_tol``; exact after ``n``
    iterations for an ``n x n`` ``A`` (in exact arithmetic). ``b``: ``(n,)``.
    """
    x = torch.zeros_like(b)
    residual = b.clone()
    direction = b.clone()
    residual_sq = residual @ residual
    for _ in range(iterations):
        if residual_sq < residual_tol:
            break
        a_direction = matrix_vector(direction)
        alpha = residual_sq / (direction @ a_direction)
        x = x + alpha * direction
        residual = residual - alpha * a_direction
        new_residual_sq = residual @ residual
        direction = residual + (new_residual_sq / residual_sq) * direction
        residual_sq = new_residual_sq
    return x


def max_step_size(direction: torch.Tensor, fisher_direction: torch.Tensor, delta: float) -> float:
    """``beta = sqrt(2 delta / s^T F s)``: the step ``beta s`` reaches the KL ball's edge
    under the quadratic model ``KL ~ 0.5 (beta s)^T F (beta s) = delta``.

    ``direction``: ``s``; ``fisher_direction``: ``F s`` (both ``(n_params,)``). A
    non-positive curvature ``s^T F s`` (a flat KL, e.g. a zero direction) gives 0."""
    curvature = float(direction @ fisher_direction)
    if curvature <= 0.0:
        return 0.0
    return (2.0 * delta / curvature) ** 0.5


@dataclass(frozen=True)
class LineSearchResult:
    """What the backtracking line search did."""

    accepted: bool
    steps: int  # candidate steps evaluated (1 when the full step is accepted)
    fraction: float  # the accepted fraction c^k of the full step; 0 when rejected
    kl: float  # mean KL at the accepted step; at the last candidate when rejected
    improvement: float  # surrogate gain at the accepted step (last candidate if rejected)


def backtracking_line_search(
    params: Sequence[torch.Tensor],
    full_step: torch.Tensor,
    evaluate: Callable[[], tuple[float, float]],
    *,
    surrogate_before: float,
    expected_improvement: float,
    delta: float,
    backtrack_coef: float,
    max_steps: int,
    accept_ratio: float,
) -> LineSearchResult:
    """Tries ``theta_old + c^k * full_step`` for ``k = 0 .. max_steps - 1`` and keeps
    the first one where::

        mean_kl <= delta
        and  gain = L(theta) - L(theta_old) > 0
        and  gain / (c^k * expected_improvement) > accept_ratio

    ``L`` is the surrogate to maximize, ``expected_improvement = g^T full_step`` its
    first-order gain. ``evaluate()`` returns ``(L, mean_kl)`` at the current
    parameters. When no candidate is accepted the parameters are restored from a copy
    taken before the first write (not from references to the live tensors, which the
    writes would have overwritten), and ``accepted`` is False.
    """
    start = flat_params(params)
    kl = improvement = float("nan")
    for k in range(max_steps):
        fraction = backtrack_coef**k
        set_flat_params(params, start + fraction * full_step)
        surrogate, kl = evaluate()
        improvement = float(surrogate) - float(surrogate_before)
        expected = fraction * float(expected_improvement)
        if (
            float(kl) <= delta
            and improvement > 0.0
            and expected > 0.0
            and improvement / expected > accept_ratio
        ):
            return LineSearchResult(True, k + 1, fraction, float(kl), improvement)
    set_flat_params(params, start)
    return LineSearchResult(False, max_steps, 0.0, float(kl), improvement)
