"""The two-node cluster script end to end (slow: starts two Ray nodes and a Ray job)."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "two_node_cluster.py"


def missing_cluster_packages() -> list[str]:
    spec = importlib.util.spec_from_file_location("two_node_cluster", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.missing_cluster_packages()


@pytest.mark.slow
def test_training_survives_losing_the_worker_node():
    missing = missing_cluster_packages()
    if missing:
        pytest.skip(
            f'needs the cluster extra (pip install -c constraints.txt -e ".[cluster]"); '
            f"missing {missing}"
        )
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--iters", "6", "--kill-after", "2"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert "ray job submit: SUCCEEDED" in out
    # An experiment file's 2 x 1 x 2 grid, as a Ray job on the two nodes.
    assert "ray job submit benchmark: SUCCEEDED, 4 run directories" in out
    assert out.count("trial done: toy:coordination/") == 4
    nodes = re.search(r"env runners on nodes: (.*)", out).group(1).split(", ")
    assert len(nodes) == 2  # runners on the head and on the worker node
    per_node = [int(node.rpartition(" x")[2]) for node in nodes]
    assert re.search(r"killed the worker node's raylet \(pid \d+\)", out)
    after = out.split("killed the worker node's raylet")[1]
    # Training went on without the runners of the lost node (Ray places the 3 runners
    # 2 + 1 either way round, so 1 or 2 of them are left).
    healthy = re.search(r"iter\s+6 .*env runners (\d)/3 healthy", after)
    assert healthy and int(healthy.group(1)) in {3 - n for n in per_node}, after[-2000:]
    assert "final checkpoint:" in after
