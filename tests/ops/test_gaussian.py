"""HARL's bounded Gaussian std: literal values, a slow reference and the inverse."""

import math

import pytest
import torch

from marllib_ext.ops.gaussian import bounded_log_std, raw_for_std


def test_bounded_log_std_literal_values_and_its_inverse():
    raw = torch.tensor([0.0, 1.0, -30.0, 30.0])
    got = bounded_log_std(raw, 0.5).exp()
    torch.testing.assert_close(got, torch.tensor([0.25, 0.5 / (1 + math.exp(-1)), 0.0, 0.5]))
    assert raw_for_std(0.5 / (1 + math.exp(-1)), 0.5) == pytest.approx(1.0)
    assert raw_for_std(0.25, 0.5) == pytest.approx(0.0)
    for bad in (0.0, 0.5, 0.7):
        with pytest.raises(ValueError, match="initial_std"):
            raw_for_std(bad, 0.5)


def test_bounded_log_std_against_the_obvious_formula_and_back():
    raw = torch.randn(7, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 4
    for bound in (0.1, 0.5, 2.0):
        want = torch.log(bound * torch.sigmoid(raw))
        torch.testing.assert_close(bounded_log_std(raw, bound), want)
        for value in raw.flatten().tolist():
            std = bound / (1 + math.exp(-value))
            assert raw_for_std(std, bound) == pytest.approx(value, rel=1e-6, abs=1e-6)
