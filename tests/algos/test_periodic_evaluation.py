"""Evaluation during training (RLlib's evaluation runner) and its marl-eval records:
the progress columns of the iterations that evaluate, the run's ``metrics.json`` in
marl-eval's layout read back, the best evaluation re-evaluated with ten times the
episodes, and training samples left untouched."""

import json
import math

import pytest

from marllib_ext import algos, make_env
from marllib_ext.algos.evaluation import (
    BEST_CHECKPOINT,
    METRICS_FILE,
    MarlEvalRecord,
    env_and_task,
)
from marllib_ext.cli.parser import build_parser
from marllib_ext.cli.train import evaluation_overrides
from marllib_ext.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def check_marl_eval_layout(data: dict) -> list[dict]:
    """marl-eval's checks (``DiagnoseData``): env -> task -> algorithm -> run -> steps,
    every step a ``step_count`` and one list of per-episode values per metric, the
    same metrics at every step and in ``absolute_metrics``. Returns the runs."""
    runs = []
    for tasks in data.values():
        for algorithms in tasks.values():
            for seeds in algorithms.values():
                for run_name, run in seeds.items():
                    assert run_name.startswith("seed_")
                    steps = {k: v for k, v in run.items() if k.startswith("step_")}
                    assert set(run) == {*steps, "absolute_metrics"}
                    metrics = None
                    for index, step in enumerate(sorted(steps, key=lambda k: int(k[5:]))):
                        assert step == f"step_{index}"
                        values = steps[step]
                        assert isinstance(values["step_count"], int)
                        names = {k for k in values if k not in ("step_count", "elapsed_time")}
                        assert metrics in (None, names)
                        metrics = names
                        assert all(isinstance(values[m], list) and values[m] for m in names)
                    assert set(run["absolute_metrics"]) == metrics
                    runs.append(run)
    return runs


@pytest.mark.parametrize(
    "env,env_args,metrics",
    [
        # both envs report their state (coverage: distinct states per episode)
        ("mpe:simple_spread", {"max_cycles": 10}, {"return", "coverage"}),
        # the env reports success; 30-step episodes keep its evaluations short
        ("grid:pass", {"max_steps": 30}, {"return", "win_rate", "coverage"}),
    ],
)
def test_run_evaluates_and_writes_marl_eval_records(ray_session, tmp_path, env, env_args, metrics):
    result = algos.get(
        "mappo",
        evaluation_interval=2,
        evaluation_duration=3,
        train_batch_size=400,
        minibatch_size=200,
        num_epochs=1,
    ).fit(make_env(env, **env_args), stop={"training_iteration": 4}, local_dir=tmp_path, seed=7)
    rows = result.progress
    # evaluations at iterations 2 and 4 only; training samples are not consumed
    assert [math.isnan(r["eval_return_mean"]) for r in rows] == [True, False, True, False]
    assert [r["eval_episodes"] for r in rows[1::2]] == [3, 3]
    steps = [r["timesteps_total"] for r in rows]  # evaluating iterations sample as many
    assert steps == [steps[0] * k for k in (1, 2, 3, 4)] and steps[0] >= 400
    if "win_rate" in metrics:
        assert all(0 <= r["eval_success_rate"] <= 1 for r in rows[1::2])
    data = json.loads((result.run_dir / METRICS_FILE).read_text())
    family, task = env.split(":")
    [run] = check_marl_eval_layout(data)
    assert list(data[family][task]["mappo"]) == ["seed_7"]
    assert [run[f"step_{k}"]["step_count"] for k in (0, 1)] == [steps[1], steps[3]]
    for k, row in zip((0, 1), rows[1::2], strict=True):
        step = run[f"step_{k}"]
        assert set(step) - {"step_count", "elapsed_time"} == metrics
        assert len(step["return"]) == 3
        assert sum(step["return"]) / 3 == pytest.approx(row["eval_return_mean"])
        # An episode of T steps visits at most T + 1 states (its start included).
        longest = 11 if env.startswith("mpe") else 31
        assert all(1 <= c <= longest for c in step["coverage"])
        assert sum(step["coverage"]) / 3 == pytest.approx(row["eval_coverage_mean"])
    assert all(len(v) == 30 for v in run["absolute_metrics"].values())  # 10 x 3 episodes
    assert (result.run_dir / BEST_CHECKPOINT).is_dir()


def test_record_keeps_the_best_and_rewrites_the_file(tmp_path):
    record = MarlEvalRecord(tmp_path, env="smax", task="3m", algorithm="mappo", seed=None)
    assert record.add(100, {"return": [1.0, 2.0]}) is True
    assert record.add(200, {"return": [0.0, 1.0]}) is False
    assert record.add(300, {"return": [3.0]}) is True
    assert record.best == (3.0, 2)
    record.set_absolute({"return": [2.5]})
    data = json.loads((tmp_path / METRICS_FILE).read_text())
    run = data["smax"]["3m"]["mappo"]["seed_0"]
    assert [run[f"step_{k}"]["step_count"] for k in range(3)] == [100, 200, 300]
    assert run["absolute_metrics"] == {"return": [2.5]}
    assert not list(tmp_path.glob("*.partial"))


def test_env_and_task():
    assert env_and_task("smax:3m") == ("smax", "3m")
    assert env_and_task("lbf:Foraging-8x8-2p-2f-coop-v3") == ("lbf", "Foraging-8x8-2p-2f-coop-v3")
    assert env_and_task("HalfCheetah-v5") == ("gymnasium", "HalfCheetah-v5")


def test_cli_flags_are_the_settings():
    args = build_parser().parse_args(
        ["train", "mappo", "--eval-every", "5", "--eval-episodes", "32", "--eval-explore",
         "--eval-video-every", "3", "--eval-final-episodes", "0"]
    )  # fmt: skip
    assert evaluation_overrides(args) == {
        "evaluation_interval": 5,
        "evaluation_duration": 32,
        "evaluation_final_episodes": 0,
        "evaluation_explore": True,
        "evaluation_video_interval": 3,
    }
    assert evaluation_overrides(build_parser().parse_args(["train", "mappo"])) == {}


@pytest.mark.parametrize(
    "settings,key",
    [
        ({"evaluation_interval": 0}, "evaluation_interval"),
        ({"evaluation_duration": 0}, "evaluation_duration"),
        ({"evaluation_interval": 2, "evaluation_video_interval": 0}, "evaluation_video_interval"),
        ({"evaluation_video_interval": 1}, "evaluation_video_interval"),  # no evaluations
    ],
)
def test_bad_evaluation_settings_name_the_key(settings, key):
    with pytest.raises(ConfigError, match=key):
        algos.get("mappo", **settings).settings(make_env("mpe:simple_spread"))


def test_a_family_that_cannot_render_turns_videos_off_and_training_goes_on(ray_session, tmp_path):
    small = {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1}
    algo = algos.get(
        "mappo", evaluation_interval=1, evaluation_duration=1, evaluation_video_interval=1, **small
    )
    with pytest.warns(UserWarning, match="videos are off for this run: .*toy:coordination"):
        result = algo.fit(
            make_env("toy:coordination"), stop={"training_iteration": 2}, local_dir=tmp_path
        )
    assert len(result.progress) == 2 and result.checkpoint_path.is_dir()
    assert not (result.run_dir / "videos").exists()
    assert not (result.run_dir / "checkpoint_video").exists()


@pytest.mark.parametrize("evaluation_budget", [None, pytest.param(1.5, marks=pytest.mark.slow)])
def test_efx_evaluates_at_the_deployment_budget_or_a_given_z(ray_session, evaluation_budget):
    """The evaluation runner plays every episode at one budget: the training runner's
    current deployment budget (the outer loop moves it), or ``evaluation_budget``;
    training keeps sampling its mixture of budgets."""
    from marllib_ext.algos.efx.callbacks import budget_connector

    config = algos.get(
        "efx_mappo",
        evaluation_interval=1,
        evaluation_duration=2,
        evaluation_budget=evaluation_budget,
        z_low=0.0,
        z_high=3.0,
        train_batch_size=200,
        minibatch_size=100,
        num_epochs=1,
    ).rllib_config(make_env("mpe:simple_spread", max_cycles=10), seed=3)
    algo = config.build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        training = budget_connector(algo.env_runner)
        evaluating = budget_connector(algo.eval_env_runner)
        assert evaluating is not training and evaluating.z_sampling == "fixed"
        assert training.z_sampling != "fixed"
        expected = training.budget if evaluation_budget is None else evaluation_budget
        assert evaluating.budget == pytest.approx(expected)
        assert evaluating.draw_initial_budgets() == (True, {"agent": pytest.approx(expected)})
        assert result["evaluation"]["env_runners"]["num_episodes"] >= 2
    finally:
        algo.stop()


def test_an_evaluation_budget_outside_the_trained_range_names_the_key():
    with pytest.raises(ConfigError, match="evaluation_budget"):
        algo = algos.get("efx_mappo", evaluation_budget=9.0, z_low=0.0, z_high=3.0)
        algo.settings(make_env("mpe:simple_spread"))


def test_no_final_reevaluation_when_asked(ray_session, tmp_path):
    env = make_env("grid:pass", max_steps=20)
    result = algos.get(
        "mappo", evaluation_interval=1, evaluation_duration=2, evaluation_final_episodes=0,
        train_batch_size=200, minibatch_size=200, num_epochs=1,
    ).fit(env, stop={"training_iteration": 2}, local_dir=tmp_path)  # fmt: skip
    data = json.loads((result.run_dir / METRICS_FILE).read_text())
    [run] = data["grid"]["pass"]["mappo"].values()
    assert run["absolute_metrics"] == {}
    assert len(run["step_0"]["return"]) == 2 and len(run["step_1"]["return"]) == 2


def test_final_episodes_in_a_run_file():
    from marllib_ext.configs.run_file import read_evaluation
    from marllib_ext.errors import ConfigError

    assert read_evaluation({"every": 5, "final_episodes": 0}) == {
        "evaluation_interval": 5, "evaluation_final_episodes": 0,
    }  # fmt: skip
    with pytest.raises(ConfigError, match="final_episodes"):
        read_evaluation({"final_episodes": -1})


def test_efx_plays_the_chosen_budgets_at_the_end(ray_session, tmp_path):
    """``evaluation_budgets``: the best evaluation's policy played from each fraction of
    ``[z_low, z_high]``, its episodes in ``budget_points.json``; a run without a budget
    is refused by name."""
    env = make_env("grid:pass", size=5, max_steps=20)
    small = {"train_batch_size": 200, "minibatch_size": 200, "num_epochs": 1}
    result = algos.get(
        "efx_mappo", evaluation_interval=1, evaluation_duration=3, evaluation_explore=True,
        evaluation_final_episodes=2, evaluation_budgets=[0.0, 0.5, 1.0], **small,
    ).fit(env, stop={"training_iteration": 2}, local_dir=tmp_path / "efx")  # fmt: skip
    data = json.loads((result.run_dir / METRICS_FILE).read_text())
    check_marl_eval_layout(data)  # marl-eval's file keeps its own layout
    points = json.loads((result.run_dir / "budget_points.json").read_text())
    assert list(points) == ["0", "0.5", "1"]
    z_high = points["1"]["z"]
    assert points["0"]["z"] == 0.0 and points["0.5"]["z"] == pytest.approx(z_high / 2)
    for point in points.values():
        # The re-evaluation's episodes (final_episodes) from each budget.
        assert len(point["return"]) == len(point["win_rate"]) == len(point["coverage"]) == 2
    with pytest.raises(ConfigError, match="evaluation_budgets"):
        algos.get(
            "mappo", evaluation_interval=1, evaluation_duration=2, evaluation_budgets=[0.5],
            **small,
        ).fit(env, stop={"training_iteration": 1}, local_dir=tmp_path / "mappo")  # fmt: skip


def test_budgets_in_a_run_file():
    from marllib_ext.configs.run_file import read_evaluation

    assert read_evaluation({"budgets": [0, 0.5, 1]}) == {"evaluation_budgets": [0.0, 0.5, 1.0]}
    for bad in ([], [1.5], "half", [True]):
        with pytest.raises(ConfigError, match="budgets"):
            read_evaluation({"budgets": bad})
    with pytest.raises(ConfigError, match="evaluation_budgets"):
        algos.get("efx_mappo", evaluation_budgets=[2.0]).settings(make_env("grid:pass"))


def test_an_experiments_budgets_reach_its_efx_algorithms_only():
    from marllib_ext.experiments.spec import expand, parse_experiment

    experiment = parse_experiment(
        {
            "name": "budgets",
            "algorithms": ["efx_mappo", "mappo"],
            "tasks": ["grid:pass"],
            "seeds": [0],
            "stop": {"env_steps": 1000},
            "evaluation": {"every": 5, "budgets": [0, 1]},
        }
    )
    efx, mappo = expand(experiment)
    assert efx.run.evaluation["evaluation_budgets"] == [0.0, 1.0]
    assert "evaluation_budgets" not in mappo.run.evaluation
    assert mappo.run.evaluation["evaluation_interval"] == 5
