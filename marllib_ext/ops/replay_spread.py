"""How far a prioritized replay's sampling distribution is from uniform, pure numpy.

For ``N`` held rows with sampling weights ``w_i = p_i^alpha`` (the sum tree's leaves)
and draw probabilities ``q_i = w_i / sum_j w_j``:

- ``total_variation = 1/2 * sum_i |q_i - 1/N|``: the share of draws that uniform
  sampling would send to other rows (0 for uniform, up to ``1 - 1/N``);
- ``effective_fraction = 1 / (N * sum_i q_i^2)``: the effective sample size over ``N``
  (1 for uniform, ``1/N`` when one row takes every draw);
- ``max_over_mean = max_i w_i / mean_i w_i``: the most favoured row's weight against
  the average.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def uniform_spread() -> dict[str, float]:
    """The three measures for uniform sampling (a store without priorities)."""
    return {"total_variation": 0.0, "effective_fraction": 1.0, "max_over_mean": 1.0}


def sampling_spread(weights: npt.ArrayLike) -> dict[str, float]:
    """The three measures above for ``weights`` of shape ``(N,)`` (non-negative, not
    all zero)."""
    w = np.asarray(weights, np.float64).reshape(-1)
    if w.size == 0 or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError("weights must be finite, non-negative and not all zero")
    q = w / w.sum()
    n = w.size
    return {
        "total_variation": float(0.5 * np.abs(q - 1.0 / n).sum()),
        "effective_fraction": float(1.0 / (n * np.square(q).sum())),
        "max_over_mean": float(w.max() / w.mean()),
    }
