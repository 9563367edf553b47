"""Experiments as files: algorithms x tasks x seeds run on Ray Tune
(``marllib-ext benchmark FILE``), with a summary and a report of the grid."""

from marllib_ext.experiments.launch import run_benchmark
from marllib_ext.experiments.spec import (
    Experiment,
    Trial,
    expand,
    load_experiment,
    parse_experiment,
)

__all__ = ["Experiment", "Trial", "expand", "load_experiment", "parse_experiment", "run_benchmark"]
