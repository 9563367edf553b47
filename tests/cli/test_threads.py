"""``--threads``: the driver's torch threads and its Ray workers' OMP_NUM_THREADS."""

import os

import torch

from marllib_ext.cli import main
from marllib_ext.cli.ray_setup import set_threads


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
