import numpy as np
import pytest

from marllib_ext.ops.novelty import (
    count_bonus,
    merge_count_tables,
    merged_moments,
    rnd_bonus,
    rnd_error,
    rounded_row_codes,
    simhash_codes,
    simhash_projection,
    visit_counts,
)


def slow_simhash(observations, projection):
    codes = []
    for row in observations:
        code = 0
        for k in range(projection.shape[1]):
            if float(np.dot(row, projection[:, k])) > 0:
                code += 2**k
        codes.append(code)
    return codes


def slow_visit_counts(codes, table):
    out = []
    for code in codes:
        table[int(code)] = table.get(int(code), 0) + 1
        out.append(table[int(code)])
    return out


@pytest.mark.parametrize("bits", [1, 8, 64])
def test_simhash_matches_the_bitwise_definition(bits):
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(50, 7))
    projection = simhash_projection(7, bits, seed=3)
    codes = simhash_codes(observations, projection)
    assert codes.dtype == np.uint64
    assert [int(c) for c in codes] == slow_simhash(observations, projection)


def test_simhash_literals():
    projection = np.array([[1.0, 0.0, -1.0], [0.0, 1.0, 1.0]])
    observations = np.array([[1.0, 2.0], [-1.0, 0.5], [0.0, 0.0]])
    # row 0: (1, 2, 1) -> bits 0,1,2 = 7; row 1: (-1, 0.5, 1.5) -> bits 1,2 = 6; row 2: 0
    assert simhash_codes(observations, projection).tolist() == [7, 6, 0]


def test_simhash_projection_is_seeded_and_checked():
    np.testing.assert_array_equal(simhash_projection(4, 16, 1), simhash_projection(4, 16, 1))
    assert not np.array_equal(simhash_projection(4, 16, 1), simhash_projection(4, 16, 2))
    with pytest.raises(ValueError, match="bits"):
        simhash_projection(4, 65, 0)
    with pytest.raises(ValueError, match="bits"):
        simhash_codes(np.zeros((2, 3)), np.zeros((3, 65)))


def test_grid_cells_get_distinct_codes_with_enough_bits():
    cells = np.array([(x, y) for x in range(7) for y in range(7)], np.float64) / 6.0
    observations = np.concatenate([cells, np.ones((49, 1))], axis=1)  # bias column
    codes = simhash_codes(observations, simhash_projection(3, 64, seed=0))
    assert len(set(codes.tolist())) >= 40  # 43-45 of 49 on seeds 0-2: few cells share one


def test_visit_counts_match_the_sequential_reference():
    rng = np.random.default_rng(1)
    table, reference = {5: 2}, {5: 2}
    for _ in range(4):
        codes = rng.integers(0, 8, size=30).astype(np.uint64)
        got = visit_counts(codes, table)
        assert got.tolist() == slow_visit_counts(codes, reference)
        assert table == reference


def test_visit_counts_literals():
    table = {1: 3}
    assert visit_counts(np.array([1, 2, 1, 2, 2], np.uint64), table).tolist() == [4, 1, 5, 2, 3]
    assert table == {1: 5, 2: 3}
    assert visit_counts(np.array([], np.uint64), table).tolist() == []


def test_merge_adds_every_runners_increment():
    merged = merge_count_tables({1: 4, 2: 1}, [{1: 2}, {3: 5, 2: 1}])
    assert merged == {1: 6, 2: 2, 3: 5}


def test_count_bonus_literals_and_range():
    np.testing.assert_allclose(count_bonus([1, 4, 100], coef=0.5), [0.5, 0.25, 0.05])
    with pytest.raises(ValueError, match="counts"):
        count_bonus([0, 1], coef=1.0)


def test_rnd_error_is_the_mean_squared_feature_error():
    target = np.array([[1.0, 2.0], [0.0, 0.0]])
    predicted = np.array([[0.0, 0.0], [0.0, 3.0]])
    np.testing.assert_allclose(rnd_error(target, predicted), [2.5, 4.5])
    with pytest.raises(ValueError, match="expected"):
        rnd_error(np.zeros((2, 3)), np.zeros((2, 2)))


def slow_rounded_row_code(row, decimals):
    modulus = 2**64
    multiplier, offset = 0x9E3779B97F4A7C15, 0x632BE59BD9B4E019
    code = 0
    for k, value in enumerate(row):
        quantized = int(np.round(value * 10.0**decimals)) % modulus
        code = (code + (quantized + offset) * pow(multiplier, k, modulus)) % modulus
    return code


def test_rounded_row_codes_match_the_modular_definition():
    rng = np.random.default_rng(2)
    observations = rng.normal(size=(40, 5)) * 3
    codes = rounded_row_codes(observations, decimals=2)
    assert [int(c) for c in codes] == [slow_rounded_row_code(r, 2) for r in observations]


def test_rounded_row_codes_tell_every_grid_cell_apart_and_ignore_float_noise():
    cells = np.array([(x, y, d) for x in range(7) for y in range(7) for d in (0, 1)], float)
    observations = cells / np.array([6.0, 6.0, 1.0])  # grid:pass 7x7's scaling
    codes = rounded_row_codes(observations, decimals=2)
    assert len(set(codes.tolist())) == len(cells)
    noisy = rounded_row_codes(observations + 1e-9, decimals=2)
    np.testing.assert_array_equal(codes, noisy)
    with pytest.raises(ValueError, match="decimals"):
        rounded_row_codes(observations, decimals=-1)


def test_rnd_error_is_one_formula_for_numpy_and_torch():
    import torch

    rng = np.random.default_rng(0)
    target, predicted = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    expected = [np.mean((t - p) ** 2) for t, p in zip(target, predicted, strict=True)]
    np.testing.assert_allclose(rnd_error(target, predicted), expected)
    torch_errors = rnd_error(torch.tensor(target), torch.tensor(predicted))
    np.testing.assert_allclose(torch_errors.numpy(), expected)


def test_rnd_bonus_literals_and_range():
    np.testing.assert_allclose(rnd_bonus([0.0, 1.0, 3.0], 1.0, coef=2.0), [0.0, 1.0, 1.5])
    # Before the predictor is trained every observation earns the bound.
    np.testing.assert_allclose(rnd_bonus([0.0, 7.0], 0.0, coef=0.5), [0.5, 0.5])
    errors = np.random.default_rng(1).exponential(size=1000) * 1e6
    bonus = rnd_bonus(errors, 3.0, coef=1.0)
    assert bonus.min() >= 0 and bonus.max() < 1
    with pytest.raises(ValueError, match="must be >= 0"):
        rnd_bonus([-1.0], 1.0, coef=1.0)


def test_merged_moments_match_the_moments_of_all_rows():
    rng = np.random.default_rng(2)
    parts = [rng.normal(loc=3.0, scale=2.0, size=(n, 3)) for n in (1, 7, 40, 0, 5)]
    count, mean, var = 0.0, np.zeros(3), np.ones(3)
    for part in parts:
        count, mean, var = merged_moments(count, mean, var, part.reshape(-1, 3))
    every = np.concatenate(parts)
    assert count == len(every)
    np.testing.assert_allclose(mean, every.mean(axis=0))
    np.testing.assert_allclose(var, every.var(axis=0))
    # Literal: {0, 2} then {4}: mean 2, population variance 8/3.
    count, mean, var = merged_moments(0.0, [0.0], [1.0], [[0.0], [2.0]])
    count, mean, var = merged_moments(count, mean, var, [[4.0]])
    assert count == 3 and mean[0] == pytest.approx(2.0) and var[0] == pytest.approx(8 / 3)
