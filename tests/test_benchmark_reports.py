"""The on-policy and trust-region tables in docs/benchmarks/on_policy.md are what
``onpolicy_table.py --report`` and ``trust_region.py --report`` print from the kept runs,
and a seed listed in ``earlier_runs.csv`` is not counted again from a CSV."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "onpolicy_table_200k"


TRUST_REGION_RESULTS = ROOT / "benchmarks" / "results" / "trust_region"


def load_script(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import their siblings
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def onpolicy_table():
    return load_script("onpolicy_table")


@pytest.fixture(scope="module")
def trust_region():
    return load_script("trust_region")


def write_run(path: Path, returns: list[float], batch: int = 50_000) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["timesteps_total", "time_total_s", "per_agent_return"])
        for i, value in enumerate(returns, start=1):
            writer.writerow([i * batch, float(i), value])


def test_earlier_seeds_are_not_read_again_from_csvs(onpolicy_table, tmp_path, capsys):
    (tmp_path / "earlier_runs.csv").write_text(
        "algo,seeds,column,env_steps,value,source\n"
        "mappo,0|1,per_agent_return,100000,-22.0,test\n"
        "mappo,0|1,per_agent_return,100000,-21.0,test\n"
        "mappo,0|1,per_agent_return,200000,-20.0,test\n"
        "mappo,0|1,per_agent_return,200000,-19.0,test\n"
    )
    write_run(tmp_path / "mappo_seed0.csv", [-99.0] * 4)  # claimed by earlier_runs.csv
    # window 3: at 100k mean(-30, -24) = -27, at 200k mean(-24, -21, -18) = -21
    write_run(tmp_path / "mappo_seed2.csv", [-30.0, -24.0, -21.0, -18.0])
    onpolicy_table.report(["mappo"], [0, 1, 2], 200_000, tmp_path)
    row = capsys.readouterr().out.strip().splitlines()[-1]
    assert row.startswith("| `mappo` | 3 |")
    assert "-23.33 [-27.00, -21.00]" in row  # mean(-22, -21, -27)
    assert "-20.00 [-21.00, -19.00]" in row  # mean(-20, -19, -21)


def test_benchmarks_md_table_is_the_report_of_the_kept_runs(onpolicy_table, capsys):
    onpolicy_table.report(onpolicy_table.on_policy_algorithms(), [0, 1, 2], 200_000, RESULTS)
    rows = capsys.readouterr().out.strip().splitlines()[2:]
    assert len(rows) == len(onpolicy_table.on_policy_algorithms())
    document = (ROOT / "docs/benchmarks/on_policy.md").read_text()
    for row in rows:
        assert row in document, row
        assert row.startswith("| `") and "| 3 |" in row, row


def write_trust_region_run(path: Path, returns: list[float], kl: list[float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["timesteps_total", "agent_return_mean", "tr_kl", "tr_accept_rate"])
        for i, (value, step_kl) in enumerate(zip(returns, kl, strict=True), start=1):
            writer.writerow([i * 10_000, value, step_kl, 1.0 if step_kl > 0 else 0.0])


def test_trust_region_report_literal(trust_region, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(trust_region, "WINDOW", 2)
    write_trust_region_run(
        tmp_path / "matrpo/seed0.csv", [-30, -28, -26, -24], [0.004, 0, 0.006, 0.002]
    )
    write_trust_region_run(
        tmp_path / "matrpo/seed1.csv", [-32, -30, -22, -20], [0.009, 0.005, 0.003, 0.001]
    )
    write_trust_region_run(tmp_path / "matrpo/seed2.csv", [-30, -28], [0.05, 0.05])  # unfinished
    trust_region.report(["matrpo", "mappo"], [0, 1, 2], 40_000, tmp_path)
    rows = capsys.readouterr().out.strip().splitlines()[2:]
    # at 20k: mean(-30, -28) = -29 and mean(-32, -30) = -31; at 40k: -25 and -21
    # KL over the last 2 iterations: 0.004 and 0.002 (mean 0.003); largest 0.009;
    # accepted over the last 2: 1.0 and 1.0
    assert rows == [
        "| `matrpo` | 2 | -30.00 ± 1.00 | -23.00 ± 2.00 [-25.00, -21.00] | 0.0030 | 0.0090 | 1.00 |"
    ]


def test_benchmarks_md_trust_region_tables_are_the_report_of_the_kept_runs(trust_region, capsys):
    document = (ROOT / "docs/benchmarks/on_policy.md").read_text()
    for env, labels, steps in trust_region.REPORTED:
        trust_region.report(labels, [0, 1, 2], steps, TRUST_REGION_RESULTS / env.replace(":", "-"))
        rows = capsys.readouterr().out.strip().splitlines()[2:]
        assert len(rows) == len(labels), (env, rows)
        for row in rows:
            assert row in document, row
            assert "| 3 |" in row, row
