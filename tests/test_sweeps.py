"""Ray Tune sweeps through the package API and the CLI."""

import pytest

from marllib_ext import make_env
from marllib_ext.algos.efx import RESULT_KEY as EFX_RESULT_KEY
from marllib_ext.cli import parse_grid
from marllib_ext.configs.algo_files import search_space
from marllib_ext.errors import ConfigError
from marllib_ext.sweeps import format_table, sweep


def test_sweep_of_two_trials_reports_both(ray_session, tmp_path):
    summaries = sweep(
        "efx_mappo",
        make_env("toy:coordination"),
        grid={"intrinsic_coef": [0.0, 1.0]},
        stop={"training_iteration": 1},
        local_dir=tmp_path,
        num_env_runners=0,
    )
    assert sorted(s.params["intrinsic_coef"] for s in summaries) == [0.0, 1.0]
    for summary in summaries:
        assert summary.error is None
        assert summary.final["training_iteration"] == 1
        assert summary.final["timesteps_total"] > 0
    table = format_table(summaries)
    assert "intrinsic_coef" in table and len(table.splitlines()) == 3


def test_bad_grid_value_fails_before_tune_starts(ray_session, tmp_path):
    with pytest.raises(ConfigError, match="config key 'num_epochs' must be int"):
        sweep(
            "mappo",
            make_env("toy:coordination"),
            grid={"num_epochs": [1, "two"]},
            stop={"training_iteration": 1},
            local_dir=tmp_path,
        )
    assert not list(tmp_path.iterdir())


def test_grid_parsing_and_yaml_search_space():
    assert parse_grid(["lr=1e-4,0.001", "actor_activation=tanh,relu"]) == {
        "lr": [0.0001, 0.001],
        "actor_activation": ["tanh", "relu"],
    }
    with pytest.raises(ConfigError, match="--grid expects"):
        parse_grid(["lr"])
    assert search_space("efx_mappo") == {
        "intrinsic_coef": [0.1, 1.0],
        "efx_advantage": ["hinge", "demand_push"],
    }
    assert search_space("mappo") == {}


@pytest.mark.slow  # the sweep below runs the same Tune path by default
def test_registry_config_runs_as_a_plain_tune_trainable(ray_session, tmp_path):
    from ray import tune

    from marllib_ext import algos

    config = algos.efx_mappo(num_env_runners=0).rllib_config("toy:coordination")
    results = tune.Tuner(
        config.algo_class,
        param_space=config,
        run_config=tune.RunConfig(
            stop={"training_iteration": 1}, storage_path=str(tmp_path), verbose=0
        ),
    ).fit()
    assert not results.errors
    metrics = results[0].metrics
    assert metrics["training_iteration"] == 1
    assert "budget_z" in metrics[EFX_RESULT_KEY]
