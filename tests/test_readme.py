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


def test_readme_env_table_is_the_generated_one():
    from marllib_ext.cli import env_table_markdown

    assert env_table_markdown() in README.read_text()
