import csv

import numpy as np
import pytest

from marllib_ext.errors import ConfigError
from marllib_ext.plotting import band, plot_runs, read_progress, trailing_mean


def write_run(path, steps, returns):
    path.mkdir(parents=True)
    with open(path / "progress.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["timesteps_total", "agent_return_mean"])
        writer.writeheader()
        for step, value in zip(steps, returns, strict=True):
            writer.writerow({"timesteps_total": step, "agent_return_mean": value})


def test_band_is_mean_min_max_on_the_shared_grid(tmp_path):
    write_run(tmp_path / "a" / "seed0", [100, 200, 300], [1.0, 2.0, 3.0])
    write_run(tmp_path / "a" / "seed1", [100, 200], [3.0, 4.0])
    curves = [read_progress(p) for p in sorted((tmp_path / "a").rglob("progress.csv"))]
    grid, mean, low, high = band(curves, "agent_return_mean")
    np.testing.assert_allclose(grid, [100, 200])  # no extrapolation past the shortest run
    np.testing.assert_allclose(mean, [2.0, 3.0])
    np.testing.assert_allclose(low, [1.0, 2.0])
    np.testing.assert_allclose(high, [3.0, 4.0])


def test_trailing_mean_against_a_loop_and_literals():
    steps = np.array([100, 200, 300, 400, 500, 600])
    values = np.array([1.0, 3.0, np.nan, 5.0, 7.0, 2.0])
    np.testing.assert_allclose(trailing_mean(steps, values, 300), [1.0, 2.0, 2.0, 4.0, 6.0, 14 / 3])
    rng = np.random.default_rng(0)
    steps = np.cumsum(rng.integers(1, 500, size=60))
    values = rng.normal(size=60)
    values[[3, 17]] = np.nan
    for window in (1, 700, 5000):
        slow = [np.nanmean(values[(steps > s - window) & (steps <= s)]) for s in steps]
        np.testing.assert_allclose(trailing_mean(steps, values, window), slow)


def test_plot_writes_a_png_with_one_curve_per_directory(tmp_path):
    write_run(tmp_path / "mappo" / "s0", [100, 200], [1.0, 2.0])
    write_run(tmp_path / "efx" / "s0", [100, 200], [0.5, 2.5])
    out = plot_runs([tmp_path / "mappo", tmp_path / "efx"], tmp_path / "curves.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_directory_and_column_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        plot_runs([tmp_path / "nope"], tmp_path / "x.png")
    write_run(tmp_path / "r", [1], [1.0])
    with pytest.raises(ConfigError, match="no run has the column 'budget_z'"):
        plot_runs([tmp_path / "r"], tmp_path / "x.png", metric="budget_z")
