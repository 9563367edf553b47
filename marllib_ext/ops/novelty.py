"""Novelty signals for intrinsic rewards: hashed visit counts (Tang et al. 2017,
"#Exploration") and random network distillation (Burda et al. 2019)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# The settings' choices (algos.config.CountFields, EFX's intrinsic_reward).
INTRINSIC_SIGNALS = ("surprisal", "count", "rnd")  # EFX's budget
BONUS_SIGNALS = ("count", "rnd")  # a bonus added to the reward (intrinsic_bonus)
COUNT_SCOPES = ("agent", "team")  # also RND's (rnd_scope)
RND_INPUT_CLIP = 5.0  # Burda et al.: normalized observations clipped to [-5, 5]
COUNT_HASHES = ("exact", "simhash")
MAX_HASH_BITS = 64  # one uint64 code per row
_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio, odd
_HASH_OFFSET = np.uint64(0x632BE59BD9B4E019)


def simhash_projection(dim: int, bits: int, seed: int) -> npt.NDArray[np.float64]:
    """``A``, ``(dim, bits)`` with i.i.d. standard normal entries: SimHash's random
    hyperplanes, drawn once per run from ``seed`` so every env runner hashes alike."""
    if not 1 <= bits <= MAX_HASH_BITS:
        raise ValueError(f"bits must be in [1, {MAX_HASH_BITS}], got {bits}")
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    return np.random.default_rng(seed).standard_normal((dim, bits))


def simhash_codes(observations: npt.ArrayLike, projection: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """``phi(x) = sgn(x A)`` packed into one integer per row: bit ``k`` is set where
    ``(x A)_k > 0``.

    Rows closer in angle share more bits, so nearby continuous observations share a
    code and discrete ones (grids) get one code each once ``bits`` is large enough.

    Args:
        observations: ``(N, dim)``.
        projection: ``(dim, bits)`` from :func:`simhash_projection`.

    Returns:
        ``(N,)`` uint64 codes.
    """
    x = np.asarray(observations, dtype=np.float64)
    a = np.asarray(projection, dtype=np.float64)
    if x.ndim != 2 or a.ndim != 2 or x.shape[1] != a.shape[0]:
        raise ValueError(
            f"observations {x.shape} and projection {a.shape}: expected (N, d), (d, k)"
        )
    if a.shape[1] > MAX_HASH_BITS:
        raise ValueError(f"projection has {a.shape[1]} bits, at most {MAX_HASH_BITS}")
    signs = (x @ a) > 0.0
    weights = np.left_shift(np.uint64(1), np.arange(a.shape[1], dtype=np.uint64))
    return (signs.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)


def rounded_row_codes(observations: npt.ArrayLike, *, decimals: int) -> npt.NDArray[np.uint64]:
    """One code per distinct row after rounding: ``q = round(x * 10^decimals)`` as
    integers, hashed as ``sum_k q_k * P^k`` in 64-bit wrap-around arithmetic (``P``
    a large odd constant), so equal rounded rows share a code and different ones
    collide with probability about ``2^-64`` per pair.

    Args:
        observations: ``(N, d)``.
        decimals: rounding precision (>= 0).

    Returns:
        ``(N,)`` uint64 codes.
    """
    x = np.asarray(observations, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"observations has shape {x.shape}, expected (N, d)")
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0, got {decimals}")
    quantized = np.round(x * 10.0**decimals).astype(np.int64).view(np.uint64)
    powers = np.ones(x.shape[1], np.uint64)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps mod 2^64 by design
        for k in range(1, x.shape[1]):
            powers[k] = powers[k - 1] * _HASH_MULTIPLIER
        return ((quantized + _HASH_OFFSET) * powers).sum(axis=1, dtype=np.uint64)


def visit_counts(codes: npt.ArrayLike, table: dict[int, int]) -> npt.NDArray[np.int64]:
    """Counts each row's visit into ``table`` (updated in place) and returns, per row,
    its code's count including this visit: ``n_t = table_before[c_t] + #{s <= t : c_s = c_t}``.

    Rows count in order, so a code seen twice in one call gets ``n`` and ``n + 1``.

    Args:
        codes: ``(N,)`` hash codes.
        table: ``{code: visits so far}``.

    Returns:
        ``(N,)`` counts, each >= 1.
    """
    codes = np.asarray(codes, dtype=np.uint64).reshape(-1)
    if codes.size == 0:
        return np.zeros(0, np.int64)
    unique, inverse, per_code = np.unique(codes, return_inverse=True, return_counts=True)
    before = np.array([table.get(int(c), 0) for c in unique.tolist()], np.int64)
    # Rank of each row among the earlier rows with its code: a stable sort by code
    # keeps row order inside each code's run.
    order = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(per_code)[:-1]])
    rank = np.empty(codes.size, np.int64)
    rank[order] = np.arange(codes.size) - np.repeat(starts, per_code)
    for code, added in zip(unique.tolist(), per_code.tolist(), strict=True):
        table[int(code)] = table.get(int(code), 0) + int(added)
    return before[inverse] + rank + 1


def merge_count_tables(base: dict[int, int], increments: list[dict[int, int]]) -> dict[int, int]:
    """``base`` plus every runner's visits since it last received ``base``: the table
    all runners continue from."""
    merged = dict(base)
    for increment in increments:
        for code, added in increment.items():
            merged[code] = merged.get(code, 0) + added
    return merged


def count_bonus(counts: npt.ArrayLike, *, coef: float) -> npt.NDArray[np.float64]:
    """``r_int = coef / sqrt(n)``, Tang et al.'s count bonus, in ``(0, coef]``.

    Args:
        counts: visit counts, each >= 1, any shape.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.size and counts.min() < 1:
        raise ValueError(f"counts must be >= 1, got a minimum of {counts.min()}")
    return coef / np.sqrt(counts)


def rnd_error(target, predicted):
    """RND's novelty: ``e(x) = ||f(x) - f_hat(x)||^2 / k``, the predictor's mean squared
    error against the fixed random target network per row. Array-generic: numpy arrays
    on the env runners (the reward), torch tensors in the learner (the predictor's
    loss is its mean), one formula.

    Args:
        target, predicted: ``(N, k)`` the two networks' features.

    Returns:
        ``(N,)``.
    """
    if not hasattr(target, "shape"):
        target = np.asarray(target, dtype=np.float64)
    if not hasattr(predicted, "shape"):
        predicted = np.asarray(predicted, dtype=np.float64)
    if tuple(target.shape) != tuple(predicted.shape) or target.ndim != 2:
        raise ValueError(
            f"target {tuple(target.shape)} and predicted {tuple(predicted.shape)}: expected (N, k)"
        )
    return ((target - predicted) ** 2).mean(axis=1)


def rnd_bonus(errors: npt.ArrayLike, reference: float, *, coef: float) -> npt.NDArray[np.float64]:
    """RND's bounded intrinsic reward ``r_int = coef * e / (e + e_ref)``, in
    ``[0, coef)``: ``coef / 2`` for an observation as novel as the average one the
    predictor was last trained on (``e_ref``, its mean error there), towards ``coef``
    for unseen ones and towards 0 for familiar ones, so EFX's budget bound
    ``Z_max = coef * T_max`` per agent holds whatever the error's raw scale. Before
    the predictor has been trained (``e_ref = 0``) every observation earns ``coef``.

    Args:
        errors: ``(N,)`` :func:`rnd_error` of each row, >= 0.
        reference: ``e_ref`` >= 0.
    """
    errors = np.asarray(errors, dtype=np.float64)
    if reference < 0 or (errors.size and errors.min() < 0):
        raise ValueError(f"errors and reference must be >= 0, got reference {reference}")
    if reference == 0:
        return np.full(errors.shape, float(coef))
    return coef * errors / (errors + reference)


def merged_moments(
    count: float, mean: npt.ArrayLike, var: npt.ArrayLike, rows: npt.ArrayLike
) -> tuple[float, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Running ``(count, mean, var)`` of every row so far after adding ``rows``
    ``(N, d)`` (Chan et al.'s parallel update; ``var`` is the population variance),
    for RND's observation normalization.

    ``n' = n + N``, ``delta = mean_rows - mean``,
    ``mean' = mean + delta * N / n'``,
    ``var' = (n var + N var_rows + delta^2 n N / n') / n'``.
    """
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"rows has shape {rows.shape}, expected (N, d)")
    mean, var = np.asarray(mean, np.float64), np.asarray(var, np.float64)
    n_new = rows.shape[0]
    if n_new == 0:
        return float(count), mean, var
    total = count + n_new
    delta = rows.mean(axis=0) - mean
    new_mean = mean + delta * n_new / total
    new_var = (count * var + n_new * rows.var(axis=0) + delta**2 * count * n_new / total) / total
    return float(total), new_mean, new_var
