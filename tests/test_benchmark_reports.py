"""The on-policy table in BENCHMARKS.md is what ``onpolicy_table.py --report`` prints from
the kept runs, and a seed listed in ``earlier_runs.csv`` is not counted again from a CSV."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "onpolicy_table_200k"


@pytest.fixture(scope="module")
def onpolicy_table():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the script imports its sibling `timing`
    try:
        spec = importlib.util.spec_from_file_location(
            "onpolicy_table", ROOT / "benchmarks" / "onpolicy_table.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


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
    document = (ROOT / "BENCHMARKS.md").read_text()
    for row in rows:
        assert row in document, row
        assert row.startswith("| `") and "| 3 |" in row, row
