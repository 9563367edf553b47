"""Run files and saved runs: what ``train --config`` reads, what ``--resume`` trusts,
and the sharing mode a run gets when none is given (no Ray)."""

import pytest

from marllib_ext import algos, make_env
from marllib_ext.algos.policy_sharing import default_share_policy
from marllib_ext.algos.registry import get_algo_spec
from marllib_ext.configs.run_file import RunSpec, resumed_run, saved_run, write_run_config
from marllib_ext.errors import ConfigError


def saved() -> RunSpec:
    return algos.get("mappo").run_spec(
        make_env("mpe:simple_speaker_listener"),
        share_policy="individual",
        seed=3,
        stop={"training_iteration": 4},
        lr=1e-3,
        evaluation_interval=2,
    )


def test_a_resolved_run_round_trips_through_yaml(tmp_path):
    run = saved()
    assert run.source == "mpe" and run.share_policy == "individual"
    assert run.set == {"lr": 1e-3} and run.evaluation == {"evaluation_interval": 2}
    assert run.settings["lr"] == 1e-3 and "gamma" in run.settings
    write_run_config(tmp_path, run)
    assert RunSpec.load(tmp_path / "config.yaml") == run


def test_saved_run_is_found_in_or_next_to_the_checkpoint(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    with pytest.raises(ConfigError, match="no config.yaml in it or next to it"):
        saved_run(checkpoint)
    write_run_config(tmp_path, saved())
    assert saved_run(checkpoint).algo == "mappo"
    with pytest.raises(ConfigError, match="does not exist"):
        saved_run(tmp_path / "missing")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("algo", "ippo", "algo 'ippo' conflicts with the checkpoint's run (algo 'mappo')"),
        ("env", "mpe:simple_spread", "env 'mpe:simple_spread' conflicts"),
        ("share_policy", "group", "share_policy 'group' conflicts"),
        ("seed", 4, "seed 4 conflicts"),
    ],
)
def test_resume_refuses_what_contradicts_the_saved_run(field, value, message):
    fields = {"algo": "mappo", "env": "mpe:simple_speaker_listener", field: value}
    asked = RunSpec(**fields)
    with pytest.raises(ConfigError) as error:
        resumed_run(saved(), asked, {field})
    assert message in str(error.value)


def test_resume_keeps_the_saved_run_and_takes_new_stop_and_evaluation():
    asked = RunSpec(
        algo="mappo",
        env="mpe:simple_speaker_listener",
        set={"lr": 1e-3, "evaluation_duration": 5},
        stop={"training_iteration": 9},
    )
    run = resumed_run(saved(), asked, {"algo"})
    assert run.algo == "mappo" and run.share_policy == "individual" and run.seed == 3
    assert run.set == {"lr": 1e-3, "evaluation_duration": 5}
    assert run.stop == {"training_iteration": 9}
    with pytest.raises(ConfigError, match=r"--set lr=0.1 conflicts .*\(lr=0.001\)"):
        resumed_run(saved(), RunSpec(algo="", env="", set={"lr": 0.1}), set())
    with pytest.raises(ConfigError, match="--set gamma=0.5 conflicts"):
        resumed_run(saved(), RunSpec(algo="", env="", set={"gamma": 0.5}), set())


@pytest.mark.parametrize(
    ("algo", "env", "mode"),
    [
        ("mappo", "mpe:simple_spread", "all"),
        ("mappo", "mpe:simple_tag", "group"),
        ("mappo", "mpe:simple_speaker_listener", "group"),
        ("happo", "mpe:simple_spread", "individual"),
        ("hatrpo", "mpe:simple_spread", "individual"),
    ],
)
def test_default_sharing_is_what_env_and_algorithm_allow(algo, env, mode):
    handle = make_env(env)
    assert default_share_policy(get_algo_spec(algo), handle) == mode
    algos.get(algo).rllib_config(handle)  # builds without naming a mode


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"algo": "mappo"}, "needs `env`"),
        ({"algo": "mappo", "env": "toy:coordination", "sed": 1}, "unknown key run file.sed"),
        ({"algo": "mappo", "env": "toy:coordination", "seed": "1"}, "seed must be an integer"),
        ({"algo": "mappo", "env": "toy:coordination", "stop": {}}, "stop needs at least one"),
    ],
)
def test_a_bad_run_file_is_refused_by_name(data, message):
    with pytest.raises(ConfigError) as error:
        RunSpec.from_mapping(data)
    assert message in str(error.value)
