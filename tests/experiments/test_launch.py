"""The experiment folder's lock: one ``benchmark`` process per experiment at a time."""

import pytest

from marllib_ext.errors import ConfigError
from marllib_ext.experiments.launch import (
    EXPERIMENT_FILE,
    experiment_dir,
    held_experiment,
    run_benchmark,
)
from marllib_ext.experiments.spec import parse_experiment

SMALL = {
    "name": "small",
    "algorithms": ["mappo"],
    "tasks": ["toy:coordination"],
    "seeds": [0],
    "stop": {"iterations": 1},
    "resources": {"env_runners": 0},
}


def test_a_second_benchmark_on_a_running_experiment_is_refused_before_it_writes(tmp_path):
    experiment = parse_experiment(SMALL)
    root = experiment_dir(experiment, tmp_path)
    root.mkdir(parents=True)
    with held_experiment(root):
        with pytest.raises(ConfigError, match=r"is being run by process \d+ on "):
            run_benchmark(experiment, out=tmp_path)
        assert sorted(p.name for p in root.iterdir()) == [".running"]
        assert not (root / EXPERIMENT_FILE).exists()
    with held_experiment(root):  # released with the block: the next run may start
        pass
