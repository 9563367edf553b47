"""The benchmark scripts: few, each built on ``benchmarks/common.py``, each importable
(a script that imports a removed sibling fails here, not when someone runs it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


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


def test_at_most_thirty_scripts_share_one_helper():
    assert len(SCRIPTS) <= 30
    for script in SCRIPTS:
        if script.name == "common.py":
            continue
        text = script.read_text()
        assert "import common" in text or "from common import" in text, script.name
        assert "ray.init(" not in text, f"{script.name}: start Ray with common.start_ray"
        assert "argparse.ArgumentParser(" not in text, f"{script.name}: use common.parser"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_imports(script):
    load_script(script.stem)


def test_the_json_result_file_names_script_arguments_and_results(tmp_path):
    common = load_script("common")
    path = common.write_json(tmp_path / "r.json", {"ratio": 1.5}, steps=10)
    import json

    record = json.loads(path.read_text())
    assert record["arguments"] == {"steps": 10} and record["results"] == {"ratio": 1.5}
    assert record["script"] == Path(__file__).name and "python" in record["machine"]
