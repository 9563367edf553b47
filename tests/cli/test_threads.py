"""``--threads``: the driver's torch threads and its Ray workers' OMP_NUM_THREADS; by
default the cores the run is given."""

import os

import torch

from marllib_ext.cli import main
from marllib_ext.cli.ray_setup import available_cores, set_threads


def test_one_thread_is_set_and_stated(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        assert set_threads(1) == "threads: torch 1 in this process"
        assert torch.get_num_threads() == 1

        assert os.environ["OMP_NUM_THREADS"] == "1"
    finally:
        torch.set_num_threads(before)


def test_zero_keeps_torchs_default(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    assert set_threads(0) == f"threads: torch {before} in this process"

    assert "OMP_NUM_THREADS" not in os.environ


def test_a_negative_count_is_refused_by_name(capsys):
    assert main(["train", "iql", "--threads", "-1"]) == 2
    assert "--threads" in capsys.readouterr().err


def test_by_default_a_run_uses_the_cores_it_is_given(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        cores = available_cores()
        assert set_threads(None) == f"threads: torch {cores} in this process (the cores available)"
        assert torch.get_num_threads() == cores
        assert set_threads(None, num_cpus=3) == "threads: torch 3 in this process (--num-cpus)"
        monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a scheduler's share
        assert set_threads(None) == "threads: torch 1 in this process (OMP_NUM_THREADS)"
        monkeypatch.delenv("OMP_NUM_THREADS")
        # Ray gives each worker its own share: the workers' OMP_NUM_THREADS is left alone.
        assert "OMP_NUM_THREADS" not in os.environ
    finally:
        torch.set_num_threads(before)


def test_the_parser_leaves_the_default_to_the_run():
    from marllib_ext.cli.parser import build_parser

    assert build_parser().parse_args(["train", "mappo"]).threads is None
