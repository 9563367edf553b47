"""RESULTS.md is what ``benchmarks/results_page.py`` makes of the stored runs, every plot
it links exists, and each cell reader gives the hand-computed values."""

from __future__ import annotations

import json
import re

import pytest

from tests.test_benchmark_reports import ROOT, load_script


@pytest.fixture(scope="module")
def page():
    return load_script("results_page")


def test_the_committed_page_is_what_the_stored_runs_give(page):
    expected = page.render_page(page.load_spec())
    assert (ROOT / "RESULTS.md").read_text() == expected, (
        "RESULTS.md is stale: python benchmarks/results_page.py"
    )


def test_every_linked_plot_and_page_exists(page):
    text = (ROOT / "RESULTS.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert any(link.startswith("docs/results/") for link in links)
    for link in links:
        assert (ROOT / link).exists(), link


def test_json_cells_read_each_seed_and_format_mean_min_max(page, tmp_path):
    for seed, value in [(0, 0.5), (1, 0.25), (2, 1.0)]:
        (tmp_path / f"seed{seed}.json").write_text(json.dumps({"greedy_win_rate": value}))
    cell = page.read_cell("t", {"files": "seed*.json", "json": "greedy_win_rate"}, tmp_path)
    assert sorted(cell.values) == [0.25, 0.5, 1.0] and sorted(cell.seeds) == [0, 1, 2]
    assert page.cell_text(cell, 2, 3) == "0.58 [0.25, 1.00]"
    assert page.cell_text(cell, 2, 5) == "0.58 [0.25, 1.00] (3 seeds)"


def test_csv_cells_average_the_window_ending_at_the_budget(page, tmp_path):
    rows = "timesteps_total,r\n100,1.0\n200,2.0\n300,4.0\n400,8.0\n"
    (tmp_path / "a_seed0.csv").write_text(rows)
    spec = {"files": "a_seed*.csv", "csv": "r", "at": 300, "window": 2}
    assert page.read_cell("t", spec, tmp_path).values == [3.0]  # (2 + 4) / 2
    with pytest.raises(page.ResultsError, match="t: .* did not reach 500"):
        page.read_cell("t", {**spec, "at": 500}, tmp_path)


def test_earlier_values_join_the_csvs_and_their_seeds_are_not_read_twice(page, tmp_path):
    (tmp_path / "earlier_runs.csv").write_text(
        "algo,seeds,column,env_steps,value,source\n"
        "a,0|1,r,300,-1.0,x\na,0|1,r,300,-3.0,x\nb,2,r,300,-9.0,x\n"
    )
    for seed, last in [(1, 99.0), (2, 6.0)]:  # seed 1 is claimed by earlier_runs.csv
        (tmp_path / f"a_seed{seed}.csv").write_text(f"timesteps_total,r\n300,{last}\n")
    spec = {"files": "a_seed*.csv", "csv": "r", "at": 300, "window": 1}
    spec["earlier"] = {"file": "earlier_runs.csv", "algo": "a"}
    assert sorted(page.read_cell("t", spec, tmp_path).values) == [-3.0, -1.0, 6.0]


def test_a_cell_without_runs_or_value_is_refused_by_its_name(page, tmp_path):
    with pytest.raises(page.ResultsError, match="SMAX / `qmix` / 3m: no stored run"):
        page.read_cell("SMAX / `qmix` / 3m", {"files": "x/seed*.json", "json": "k"}, tmp_path)
    (tmp_path / "seed0.json").write_text(json.dumps({"win_rate": None}))
    with pytest.raises(page.ResultsError, match="has no value under 'win_rate'"):
        page.read_cell("t", {"files": "seed*.json", "json": "win_rate"}, tmp_path)


def test_every_reproduction_command_names_a_script_and_its_own_flags(page):
    """Each row's command runs a script in ``benchmarks/`` with flags that script
    defines (read from its ``add_argument`` calls)."""
    for table in page.load_spec()["tables"]:
        for row in table["rows"]:
            for line in row["command"].strip().splitlines():
                words = line.replace(";", " ").split()
                script = next(w for w in words if w.startswith("benchmarks/"))
                source = (ROOT / script).read_text()
                for flag in (w for w in words if w.startswith("--")):
                    assert f'"{flag}"' in source, (row["label"], script, flag)
