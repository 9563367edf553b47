"""``marllib-ext report`` over marl-eval records: the table's numbers are
``ops.statistics`` on the runs' final scores, and every plot is written."""

import json

import numpy as np
import pytest

from marllib_ext.algos.evaluation import MarlEvalRecord
from marllib_ext.cli.parser import build_parser
from marllib_ext.errors import ConfigError
from marllib_ext.ops.statistics import iqm, probability_of_improvement
from marllib_ext.report import find_metric_files, load_records, report_data

WINS = {"good": [0.9, 0.8, 0.7, 1.0, 0.6], "weak": [0.2, 0.1, 0.4, 0.3, 0.5]}


def _records(root):
    """Two algorithms x two SMAX maps x 5 seeds, two evaluations each; the last one's
    episodes average to the seed's final win rate."""
    for algorithm, finals in WINS.items():
        for task_shift, task in ((0.0, "3m"), (-0.1, "2s3z")):
            for seed, final in enumerate(finals):
                run_dir = root / algorithm / task / f"seed{seed}"
                run_dir.mkdir(parents=True)
                record = MarlEvalRecord(
                    run_dir, env="smax", task=task, algorithm=algorithm, seed=seed
                )
                record.add(1000, {"return": [0.0], "win_rate": [0.0, 0.0]})
                win = round(final + task_shift, 2)
                record.add(2000, {"return": [1.0], "win_rate": [win, win]})


def test_report_numbers_are_the_statistics_of_the_final_scores(tmp_path):
    _records(tmp_path / "runs")
    args = build_parser().parse_args(
        ["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report"), "--reps", "200"]
    )
    assert args.func(args) == 0
    data = report_data(load_records(find_metric_files([tmp_path / "runs"])))
    assert data.metric == "win_rate" and data.runs == 5
    good = np.array([[w - 0.1, w] for w in WINS["good"]])  # tasks sorted: 2s3z, 3m
    np.testing.assert_allclose(data.scores["good"], good)
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"| `good` | {iqm(good):.3f} [" in text
    p = probability_of_improvement(data.scores["good"], data.scores["weak"])
    assert f"| `good` | `weak` | {p:.3f} [" in text
    for name in (
        "aggregates",
        "probability_of_improvement",
        "performance_profile",
        "sample_efficiency",
    ):
        assert (tmp_path / "report" / f"{name}.png").stat().st_size > 1000
    np.testing.assert_allclose(data.curve_steps, [1000, 2000])


def test_returns_are_normalized_per_task(tmp_path):
    _records(tmp_path / "runs")
    data = report_data(load_records(find_metric_files([tmp_path / "runs"])), metric="return")
    assert data.scores["good"].max() <= 1 and data.scores["good"].min() >= 0


def test_bad_input_names_what_is_wrong(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        find_metric_files([tmp_path / "nowhere"])
    with pytest.raises(ConfigError, match="--eval-every"):
        find_metric_files([tmp_path])
    _records(tmp_path / "a")
    (tmp_path / "b").mkdir()
    first = next((tmp_path / "a").rglob("metrics.json"))
    (tmp_path / "b" / "metrics.json").write_text(json.dumps(json.loads(first.read_text())))
    with pytest.raises(ConfigError, match="in both"):
        load_records(find_metric_files([tmp_path / "a", tmp_path / "b"]))
