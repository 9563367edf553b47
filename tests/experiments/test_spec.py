"""Experiment files: parsed into typed trials, every bad field refused by name (no Ray)."""

import numpy as np
import pytest

from marllib_ext.errors import ConfigError
from marllib_ext.experiments import expand, parse_experiment
from marllib_ext.experiments.launch import checked_trials, plan
from marllib_ext.ops.statistics import student_t_interval, t_quantile_975

ISSUE_EXAMPLE = {
    "name": "smax_small",
    "algorithms": [
        "mappo",
        {"algo": "qmix", "source": "pymarl2", "label": "qmix@pymarl2", "set": {"td_lambda": 0.6}},
    ],
    "tasks": [
        "smax:3m",
        {"env": "lbf:Foraging-8x8-2p-2f-coop-v3", "env_args": {"action_masks": True}},
    ],
    "seeds": [0, 1, 2],
    "stop": {"env_steps": 200000},
    "evaluation": {"every": 5, "episodes": 32},
}


def small(**changes):
    data = {
        "name": "tiny",
        "algorithms": ["mappo", "ippo"],
        "tasks": ["toy:coordination", {"env": "mpe:simple_spread", "env_args": {"N": 2}}],
        "seeds": [0, 1],
        "stop": {"iterations": 2},
    }
    data.update(changes)
    return data


def test_the_issue_example_expands_to_one_trial_per_algorithm_task_and_seed():
    experiment = parse_experiment(ISSUE_EXAMPLE)
    trials = expand(experiment)
    assert len(trials) == 2 * 2 * 3
    names = [t.name for t in trials]
    assert len(set(names)) == len(names)
    assert names[0] == "smax:3m/mappo/seed_0"
    qmix = [t for t in trials if t.algorithm == "qmix@pymarl2"][0]
    assert qmix.run.algo == "qmix" and qmix.run.source == "pymarl2"
    assert qmix.run.set == {"td_lambda": 0.6}
    assert qmix.run.stop == {"timesteps_total": 200000}
    assert qmix.run.evaluation == {"evaluation_interval": 5, "evaluation_duration": 32}
    lbf = [t for t in trials if t.run.env.startswith("lbf")][0]
    assert lbf.run.env_args == {"action_masks": True}
    assert str(qmix.path) == "smax-3m/qmix@pymarl2/seed_0"


def test_resources_and_sharing_reach_every_trial():
    experiment = parse_experiment(
        small(resources={"env_runners": 0, "envs_per_env_runner": 4}, share_policy="all")
    )
    for trial in expand(experiment):
        assert trial.run.set["num_env_runners"] == 0
        assert trial.run.set["num_envs_per_env_runner"] == 4
        assert trial.run.share_policy == "all"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"seed": [0]}, "unknown key experiment.seed"),
        ({"algorithms": [{"algo": "mappo", "sett": {}}]}, "unknown key algorithms[0].sett"),
        ({"tasks": [{"env": "toy:coordination", "args": {}}]}, "unknown key tasks[0].args"),
        ({"resources": {"gpus": 1}}, "unknown key resources.gpus"),
        ({"stop": {"steps": 10}}, "unknown key stop.steps"),
        ({"stop": {"env_steps": "many"}}, "stop.env_steps must be a number"),
        ({"evaluation": {"every": 0}}, "evaluation.every must be >= 1"),
        ({"seeds": [0, "1"]}, "seeds[1] must be an integer"),
        ({"seeds": []}, "seeds must be a non-empty list"),
        ({"algorithms": "mappo"}, "algorithms must be a non-empty list"),
        ({"algorithms": [{"source": "mpe"}]}, "algorithms[0] needs `algo`"),
        ({"algorithms": ["mappo", "mappo"]}, "two algorithms have the label 'mappo'"),
        ({"name": "a b"}, "name 'a b' must be"),
        ({"checkpoint_every": 0}, "checkpoint_every must be an integer >= 1"),
        ({"algorithms": [{"algo": "mappo", "set": [1]}]}, "algorithms[0].set must be a mapping"),
    ],
)
def test_a_bad_field_is_refused_by_name(changes, message):
    with pytest.raises(ConfigError) as error:
        parse_experiment(small(**changes))
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"algorithms": ["mapo"]}, "trial toy:coordination/mapo/seed_0: unknown algorithm"),
        (
            {"algorithms": [{"algo": "mappo", "set": {"lrr": 1}}]},
            "trial toy:coordination/mappo+lrr=1/seed_0: unknown config key 'lrr'",
        ),
        ({"tasks": ["mpe:simple_sprad"]}, "unknown env 'mpe:simple_sprad'"),
        (
            {"tasks": ["mpe:simple_speaker_listener"], "share_policy": "all"},
            "share_policy='all' is not allowed",
        ),
    ],
)
def test_every_trial_is_built_before_anything_starts(changes, message):
    with pytest.raises(ConfigError) as error:
        checked_trials(parse_experiment(small(**changes)))
    assert message in str(error.value)


def test_dry_run_lists_every_trial_with_its_budget():
    experiment = parse_experiment(small(stop={"env_steps": 1000}))
    text = plan(experiment, checked_trials(experiment))
    assert "8 trials, each until env_steps 1000" in text
    assert "mpe:simple_spread+N=2/ippo/seed_1" in text
    assert "total: 8,000 env steps" in text


def test_student_t_interval_against_literals():
    # Two scores: mean 1, s = sqrt(2), t_{0.975,1} = 12.7062: half width 12.7062.
    mean, low, high = student_t_interval(np.array([0.0, 2.0]))
    assert mean == 1.0
    assert low == pytest.approx(1 - 12.7062) and high == pytest.approx(1 + 12.7062)
    mean, low, high = student_t_interval(np.array([3.0]))
    assert mean == 3.0 and np.isnan(low) and np.isnan(high)


def test_t_quantiles_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    for dof in (1, 2, 5, 10, 29, 30, 31, 50, 200):
        assert t_quantile_975(dof) == pytest.approx(stats.t.ppf(0.975, dof), abs=2e-4)


def test_an_algorithm_may_run_on_some_tasks_and_a_task_may_have_its_own_budget():
    experiment = parse_experiment(
        small(
            algorithms=["mappo", {"algo": "ippo", "tasks": ["toy:coordination"]}],
            tasks=[
                "toy:coordination",
                {"env": "toy:legal_moves", "stop": {"env_steps": 800}},
            ],
        )
    )
    trials = expand(experiment)
    assert [t.name for t in trials if t.algorithm == "ippo"] == [
        "toy:coordination/ippo/seed_0",
        "toy:coordination/ippo/seed_1",
    ]
    budgets = {t.task: t.run.stop for t in trials}
    assert budgets == {
        "toy:coordination": {"training_iteration": 2},
        "toy:legal_moves": {"timesteps_total": 800},
    }
    with pytest.raises(ConfigError, match="algorithms\\[1\\].tasks names 'toy:cordination'"):
        parse_experiment(
            small(algorithms=["mappo", {"algo": "ippo", "tasks": ["toy:cordination"]}])
        )


def test_every_experiment_file_in_the_repository_is_valid():
    from pathlib import Path

    from marllib_ext.experiments import load_experiment

    files = sorted((Path(__file__).parents[2] / "benchmarks" / "experiments").glob("*.yaml"))
    assert files
    for file in files:
        experiment = load_experiment(file)
        assert experiment.name == file.stem
        assert expand(experiment)


def test_summary_lists_an_algorithm_only_under_the_tasks_it_runs(tmp_path):
    from marllib_ext.experiments.summary import summary_table

    experiment = parse_experiment(
        small(algorithms=["mappo", {"algo": "ippo", "tasks": ["toy:coordination"]}])
    )
    table = summary_table(experiment, expand(experiment), tmp_path)
    toy, spread = table.split("## mpe")
    assert "`ippo` | – | not run yet" in toy
    assert "`ippo`" not in spread and "`mappo` | – | not run yet" in spread


def test_a_trial_whose_worker_never_started_is_named_from_its_folder():
    """Tune's result of a trial whose worker failed to start carries no config; the
    failure report still names the trial."""
    from types import SimpleNamespace

    from marllib_ext.experiments.launch import _trial_name

    configs = [{"name": "grid:pass+size=7/efx_mappo@rnd/seed_2"}]
    started = SimpleNamespace(config={"trial": configs[0]}, path="/x/anything")
    assert _trial_name(started, configs) == configs[0]["name"]
    never = SimpleNamespace(config=None, path="/x/tune/grid-pass+size=7__efx_mappo@rnd__seed_2")
    assert _trial_name(never, configs) == configs[0]["name"]
    unknown = SimpleNamespace(config={}, path="/x/tune/other")
    assert _trial_name(unknown, configs) == "other"


def test_a_stored_run_counts_as_finished_only_with_its_stop_and_final_evaluations(tmp_path):
    """What a checkout of stored results keeps when the experiment runs again without
    Tune's state: a run that reached its stop and wrote the end-of-run evaluations."""
    import json

    from marllib_ext.experiments.summary import stored_run_finished

    experiment = parse_experiment(
        small(
            algorithms=["efx_mappo"],
            stop={"env_steps": 1000},
            evaluation={"every": 1, "episodes": 2, "budgets": [0, 1]},
        )
    )
    run = expand(experiment)[0].run
    run_dir = tmp_path / "seed_0"
    run_dir.mkdir()
    assert not stored_run_finished(run, run_dir)
    (run_dir / "progress.csv").write_text("training_iteration,timesteps_total\n1,500\n")
    assert not stored_run_finished(run, run_dir)  # short of its stop
    (run_dir / "progress.csv").write_text("training_iteration,timesteps_total\n1,500\n2,1000\n")
    step = {"step_count": 1000, "return": [1.0, 0.0]}
    record = {"absolute_metrics": {}, "step_0": step}
    (run_dir / "metrics.json").write_text(json.dumps({"e": {"t": {"a": {"seed_0": record}}}}))
    assert not stored_run_finished(run, run_dir)  # stopped before its final evaluation
    record["absolute_metrics"] = {"return": [1.0] * 20}
    (run_dir / "metrics.json").write_text(json.dumps({"e": {"t": {"a": {"seed_0": record}}}}))
    assert not stored_run_finished(run, run_dir)  # budget points asked, not written
    (run_dir / "budget_points.json").write_text("{}")
    assert stored_run_finished(run, run_dir)
