"""RESULTS.md is what ``benchmarks/results_page.py`` makes of the stored runs, every plot
it links exists, and each cell reader gives the hand-computed values."""

from __future__ import annotations

import json
import re

import pytest

from tests.test_benchmarks import ROOT, load_script


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


def test_every_table_is_reproduced_by_one_experiment_file(page):
    """Each table names a file in ``benchmarks/experiments/`` that loads; each row's
    algorithm and each column's task are labels of that file; the Reproduce block is
    its one ``marllib-ext benchmark`` line."""
    from marllib_ext.experiments import load_experiment

    text = (ROOT / "RESULTS.md").read_text()
    for table in page.load_spec()["tables"]:
        file = ROOT / "benchmarks" / "experiments" / f"{table['experiment']}.yaml"
        experiment = load_experiment(file)
        algorithms = {a.label for a in experiment.algorithms}
        tasks = {t.label for t in experiment.tasks}
        assert {table["tasks"][column]["task"] for column in table["columns"]} <= tasks
        for row in table["rows"]:
            if row.get("reference"):
                continue
            labels = algorithms
            if "experiment" in row:  # a row rerun by a file of its own
                own = ROOT / "benchmarks" / "experiments" / f"{row['experiment']}.yaml"
                labels = {a.label for a in load_experiment(own).algorithms}
                assert f"benchmarks/experiments/{row['experiment']}.yaml" in text
            for column in table["columns"]:
                assert page.row_algorithm(row, column) in labels, (table["slug"], row)
            for more in row.get("more_seeds", []):  # files that add seeds to the row
                own = ROOT / "benchmarks" / "experiments" / f"{more}.yaml"
                more_labels = {a.label for a in load_experiment(own).algorithms}
                assert {page.row_algorithm(row, c) for c in table["columns"]} <= more_labels
                assert f"benchmarks/experiments/{more}.yaml" in text
        line = f"marllib-ext benchmark benchmarks/experiments/{table['experiment']}.yaml"
        assert line in text


def write_run(run, steps: int, record: dict, env: str = "smax", task: str = "3m"):
    """A stored run with a 1,000-step budget that stopped at ``steps``, evaluated as
    ``record`` (one marl-eval run)."""
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("stop: {env_steps: 1000}\n")
    (run / "progress.csv").write_text(f"timesteps_total,x\n{steps},0\n")
    (run / "metrics.json").write_text(json.dumps({env: {task: {"a": {"seed_0": record}}}}))


def test_a_cell_reads_the_experiment_runs_that_reached_their_budget(page, tmp_path):
    table = {
        "experiment": "exp",
        "tasks": {"col": {"task": "smax:3m"}},
        "runs": {"metric": "win_rate"},
    }
    root = tmp_path / "exp" / "runs" / "smax-3m" / "qmix@pymarl2"
    for seed, (steps, wins) in enumerate([(1000, [1.0, 0.0]), (1000, [1.0, 1.0]), (500, [0.0])]):
        record = {"step_0": {"step_count": 10, "win_rate": [0.0]}}
        record["step_1"] = {"step_count": steps, "win_rate": wins}
        write_run(root / f"seed_{seed}", steps, record)
    cell = page.read_runs(table, {"algorithm": "qmix@pymarl2"}, "col", tmp_path)
    assert cell.values == [0.5, 1.0] and cell.seeds == [0, 1]  # seed 2 stopped at 500
    assert not cell.earlier
    assert page.read_runs(table, {"algorithm": "vdn"}, "col", tmp_path) is None

    more = tmp_path / "exp_seeds" / "runs" / "smax-3m" / "qmix@pymarl2" / "seed_3"
    write_run(more, 1000, {"step_1": {"step_count": 1000, "win_rate": [0.25]}})
    row = {"algorithm": "qmix@pymarl2", "more_seeds": ["exp_seeds"]}
    cell = page.read_runs(table, row, "col", tmp_path)
    assert cell.values == [0.5, 1.0, 0.25] and cell.seeds == [0, 1, 3]
    write_run(
        tmp_path / "exp_seeds" / more.relative_to(tmp_path / "exp_seeds").parent / "seed_1",
        1000,
        {"step_1": {"step_count": 1000, "win_rate": [0.0]}},
    )
    with pytest.raises(ValueError, match="seed 1 of qmix@pymarl2 is in two files"):
        page.read_runs(table, row, "col", tmp_path)


def test_budget_rows_read_efx_budget_points_and_solved_seeds_are_counted(page, tmp_path):
    table = {
        "experiment": "exp",
        "tasks": {"col": {"task": "grid:pass"}},
        "runs": {"metric": "win_rate"},
    }
    root = tmp_path / "exp" / "runs" / "grid-pass" / "efx_mappo"
    for seed, (last, at_half) in enumerate([(0.0, [1.0, 0.0]), (0.25, [1.0, 1.0])]):
        run = root / f"seed_{seed}"
        write_run(run, 1000, {"step_0": {"step_count": 1000, "win_rate": [last]}}, "grid", "pass")
        points = {"0.5": {"z": 50.0, "win_rate": at_half}}
        (run / "budget_points.json").write_text(json.dumps(points))
    last = page.read_runs(table, {"algorithm": "efx_mappo"}, "col", tmp_path)
    assert last.values == [0.0, 0.25]
    half = page.read_runs(table, {"algorithm": "efx_mappo", "budget": 0.5}, "col", tmp_path)
    assert half.values == [0.5, 1.0]
    assert page.read_runs(table, {"algorithm": "efx_mappo", "budget": 1}, "col", tmp_path) is None
    assert page.cell_text(half, 2, 2, solved_at=0.5) == "0.75 [0.50, 1.00], 2/2 solved"
    assert page.cell_text(last, 2, 2, solved_at=0.5) == "0.12 [0.00, 0.25], 0/2 solved"
