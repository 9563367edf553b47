"""Every ``marllib-ext`` command fenced in the README and the docs parses with the CLI's
parser (a renamed flag or a sub-command that no longer exists fails here)."""

import re
import shlex
from pathlib import Path

import pytest

from marllib_ext.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "RESULTS.md"]
DOCS += sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def fenced_commands(path: Path) -> list[str]:
    """``marllib-ext ...`` invocations in the file's fenced blocks (a ``$ `` prompt,
    ``&&`` chains, ``ray job submit --`` and continuation lines handled; YAML, Python
    and program output are not commands)."""
    commands = []
    for language, block in FENCE.findall(path.read_text()):
        if language == "text":  # synopses and printed output
            continue
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.strip().removeprefix("$ ")
            for part in line.split("&&"):
                part = part.strip()
                if " -- marllib-ext " in part:
                    part = part.split(" -- ", 1)[1]
                if re.match(r"^(WANDB_MODE=\S+ )?marllib-ext( |$)", part):
                    commands.append(part.split(" #")[0].strip())
    return commands


def cases():
    for path in DOCS:
        for command in fenced_commands(path):
            yield pytest.param(command, id=f"{path.relative_to(ROOT)}: {command[:60]}")


def test_the_docs_have_commands():
    assert len(list(cases())) > 20


@pytest.mark.parametrize("command", list(cases()))
def test_a_fenced_command_parses(command):
    words = shlex.split(re.sub(r"\$\w+", "0", command))  # shell variables: a number
    words = words[words.index("marllib-ext") + 1 :]
    if words in ([], ["--help"]):
        return
    try:
        build_parser().parse_args(words)
    except SystemExit as error:
        pytest.fail(f"{command!r} does not parse (exit {error.code})")
