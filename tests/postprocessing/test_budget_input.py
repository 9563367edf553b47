"""BudgetInput: the one owner of z's place and scale in network inputs."""

import gymnasium as gym
import numpy as np
import pytest

from marllib_ext.postprocessing.budget_input import BudgetInput


def test_normalize_literal_and_round_trip():
    budget = BudgetInput(z_low=0.0, z_high=120.0)
    np.testing.assert_allclose(budget.normalize([0.0, 30.0, 120.0]), [0.0, 0.25, 1.0])
    obs = budget.append(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([30.0, 90.0]))
    assert obs.dtype == np.float32 and obs.shape == (2, 3)
    np.testing.assert_allclose(obs[:, -1], [0.25, 0.75])
    np.testing.assert_allclose(budget.read(obs), [30.0, 90.0], rtol=1e-6)
    np.testing.assert_allclose(budget.read_normalized(obs), [0.25, 0.75])


def test_scalar_budget_broadcasts_and_stays_in_unit_interval():
    budget = BudgetInput(z_low=-75.0, z_high=0.0)
    obs = budget.append(np.zeros(4), -75.0)
    assert obs.shape == (5,) and obs[-1] == 0.0
    rng = np.random.default_rng(0)
    u = budget.normalize(rng.uniform(-75, 0, size=1000))
    assert u.min() >= 0.0 and u.max() <= 1.0


def test_empty_range_feeds_zero_and_reads_z_low():
    budget = BudgetInput(z_low=2.0, z_high=2.0)
    obs = budget.append(np.ones(3), 2.0)
    assert obs[-1] == 0.0 and budget.read(obs) == pytest.approx(2.0)


def test_widened_space_and_bad_spaces():
    space = BudgetInput.widen(gym.spaces.Box(-1.0, 1.0, (3,), np.float32), name="agent 'a'")
    assert space.shape == (4,) and space.low[-1] == 0.0 and space.high[-1] == 1.0
    with pytest.raises(ValueError, match="agent 'a'"):
        BudgetInput.widen(gym.spaces.Discrete(3), name="agent 'a'")
    with pytest.raises(ValueError, match="z_low"):
        BudgetInput(z_low=1.0, z_high=0.0)
