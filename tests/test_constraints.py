"""``constraints.txt`` pins every direct dependency and test tool of ``pyproject.toml``
to the exact version the suite last passed with, so the README's install gives every
machine the same packages (a pip that keeps an older install, or a fresh machine that
takes the newest release, would otherwise test different code)."""

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")

ROOT = Path(__file__).resolve().parents[1]


def direct_requirements() -> list[Requirement]:
    """Every requirement ``pyproject.toml`` names: the dependencies and every extra's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines += extra
    return [Requirement(line) for line in lines]


def pins(text: str) -> dict[str, str]:
    """``{canonical name: version}`` of a constraints file's ``name==version`` lines;
    any other requirement line is an error naming it."""
    found = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        if match is None:
            raise ValueError(f"constraints.txt line {number}: {raw!r} is not name==version")
        found[canonicalize_name(match[1])] = match[2]
    return found


def unpinned(requirements: list[Requirement], pinned: dict[str, str]) -> list[str]:
    """What a constraints file leaves open: each requirement without a pin, or whose pin
    its own specifier refuses, as one line naming it."""
    problems = []
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        if name not in pinned:
            problems.append(f"{requirement.name}: no name==version line")
        elif not requirement.specifier.contains(pinned[name], prereleases=True):
            problems.append(f"{requirement.name}: pin {pinned[name]} outside {requirement}")
    return problems


def test_every_direct_dependency_and_test_tool_is_pinned():
    pinned = pins((ROOT / "constraints.txt").read_text())
    assert unpinned(direct_requirements(), pinned) == []


def test_torch_stays_a_range_in_pyproject_and_the_cpu_wheel_in_constraints():
    torch = next(r for r in direct_requirements() if r.name == "torch")
    assert str(torch.specifier) == ">=2.4"
    assert pins((ROOT / "constraints.txt").read_text())["torch"] == "2.13.0"


def test_the_check_flags_a_missing_pin_a_range_and_a_pin_outside_the_specifier():
    requirements = [Requirement("numpy"), Requirement("ray[rllib]==2.60.*")]
    assert unpinned(requirements, {"numpy": "2.4.6", "ray": "2.60.0"}) == []
    assert unpinned(requirements, {"ray": "2.60.0"}) == ["numpy: no name==version line"]
    assert unpinned(requirements, {"numpy": "2.4.6", "ray": "2.61.0"}) == [
        "ray: pin 2.61.0 outside ray[rllib]==2.60.*"
    ]
    with pytest.raises(ValueError, match="line 2: 'numpy>=2' is not name==version"):
        pins("torch==2.13.0\nnumpy>=2\n")
    assert pins("# a comment\nPyYAML==6.0.4  # why\n") == {"pyyaml": "6.0.4"}
