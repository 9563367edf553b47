"""The README's algorithm and env tables list exactly what the registries hold."""

import re
from pathlib import Path

from marllib_ext.algos import ALGORITHMS
from tests.helpers import BUILTIN_ENVS

README = Path(__file__).resolve().parents[1] / "README.md"


def table_names() -> set[str]:
    return set(re.findall(r"^\| `([^`]+)`", README.read_text(), flags=re.MULTILINE))


def test_readme_tables_match_the_registries():
    assert table_names() == set(ALGORITHMS) | set(BUILTIN_ENVS)


def test_readme_tables_are_the_generated_ones():
    from marllib_ext.cli import algorithm_table_markdown, env_table_markdown

    assert algorithm_table_markdown() in README.read_text()
    assert env_table_markdown() in README.read_text()
    assert env_table_markdown() in (README.parent / "docs" / "envs.md").read_text()


def test_readme_holds_no_long_lines_and_no_test_timings():
    for number, line in enumerate(README.read_text().splitlines(), start=1):
        assert len(line) <= 300, f"README.md:{number} has {len(line)} characters"
    assert not re.search(r"\d+(\.\d+)? minutes", README.read_text())


def test_readme_is_a_short_guide_with_the_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 350
    assert "pip install -c constraints.txt -e . && marllib-ext train mappo" in text
    assert 'pip install -c constraints.txt -e ".[test]" && python -m pytest' in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert 'pip install -c constraints.txt -e ".[test]" && python -m pytest' in ci


def test_readme_links_point_to_files_that_exist():
    for target in re.findall(r"\]\(([^)#]+)\)", README.read_text()):
        assert (README.parent / target).exists(), target


def test_design_doc_schedule_table_is_the_declared_schedules():
    from marllib_ext.cli.listing import schedule_table_markdown

    design = Path(__file__).resolve().parents[1] / "docs" / "design.md"
    assert schedule_table_markdown() in design.read_text()
