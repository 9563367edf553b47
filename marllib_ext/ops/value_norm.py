"""Value normalization (the MAPPO paper's and HARL's ``ValueNorm``): the critic learns
targets standardized by running moments, and its outputs are de-normalized wherever
returns are needed (GAE, value targets). numpy or torch, no Ray import.

Running moments, updated per batch of targets ``x`` (``N`` values) with ``beta``
close to 1::

    m  <- beta m  + (1 - beta) mean(x)
    s  <- beta s  + (1 - beta) mean(x ** 2)
    d  <- beta d  + (1 - beta)              (debiasing term, 0 at the start)

    mu = m / max(d, eps),   var = max(s / max(d, eps) - mu ** 2, min_var)

``normalize(x) = (x - mu) / sqrt(var)``, ``denormalize(y) = y sqrt(var) + mu``. With
``d = 0`` (no batch seen yet) both are ``mu = 0, var = min_var``: HARL's start.
"""

from __future__ import annotations

from typing import Any

EPSILON = 1e-5
MIN_VARIANCE = 1e-2


def update_moments(
    moments: tuple[Any, Any, Any], batch_mean: Any, batch_mean_sq: Any, beta: float
) -> tuple[Any, Any, Any]:
    """``(m, s, d)`` after one batch whose values have mean ``batch_mean`` and mean of
    squares ``batch_mean_sq`` (scalars or tensors, all the same kind)."""
    mean, mean_sq, debias = moments
    return (
        beta * mean + (1.0 - beta) * batch_mean,
        beta * mean_sq + (1.0 - beta) * batch_mean_sq,
        beta * debias + (1.0 - beta),
    )


def mean_and_variance(moments: tuple[Any, Any, Any]) -> tuple[Any, Any]:
    """The debiased ``(mu, var)`` of running moments ``(m, s, d)`` (python floats or
    0-d tensors)."""
    mean, mean_sq, debias = moments
    scale = max(float(debias), EPSILON)
    mu = mean / scale
    var = mean_sq / scale - mu**2
    return mu, max(var, MIN_VARIANCE)


def normalize(values: Any, moments: tuple[Any, Any, Any]) -> Any:
    """``(values - mu) / sqrt(var)``; ``values`` any shape."""
    mu, var = mean_and_variance(moments)
    return (values - mu) / var**0.5


def denormalize(values: Any, moments: tuple[Any, Any, Any]) -> Any:
    """``values * sqrt(var) + mu``; the inverse of :func:`normalize`."""
    mu, var = mean_and_variance(moments)
    return values * var**0.5 + mu
