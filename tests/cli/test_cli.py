"""The real CLI at tiny size, and one clear error line per bad input."""

import subprocess
import sys
from pathlib import Path

import pytest


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "marllib_ext.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_train_prints_progress_and_checkpoint(tmp_path):
    result = run_cli(
        "train",
        "mappo",
        "--env",
        "toy:coordination",
        "--stop-iters",
        "2",
        "--set",
        "num_env_runners=0",
        "--set",
        "lr=1e-3",
        "--seed",
        "3",
        "--num-cpus",
        "2",
        "--local-dir",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sampling = [line for line in result.stdout.splitlines() if line.startswith("sampling:")]
    assert sampling == ["sampling: rollout blocks"]  # copies of the env, as one array world
    progress = [line for line in result.stdout.splitlines() if line.startswith("iter")]
    assert len(progress) == 2
    assert "env steps" in progress[0] and "episode return" in progress[0]
    checkpoint = Path(result.stdout.split("checkpoint: ")[1].split()[0])
    assert checkpoint.exists()
    assert (checkpoint.parent / "progress.csv").read_text().count("\n") == 3


def test_list_shows_algorithms_and_envs(tmp_path):
    result = run_cli("list", cwd=tmp_path)
    assert result.returncode == 0
    for name in ("ippo", "mappo", "qmix", "mpe:simple_spread", "toy:coordination"):
        assert name in result.stdout
    # Env families that take an id are discoverable, each with an example, its extra and
    # whether that extra is installed here.
    from marllib_ext.envs.by_name import ENV_FAMILIES

    for family in ENV_FAMILIES:
        line = next(line for line in result.stdout.splitlines() if family.pattern in line)
        assert "e.g. " in line
        if not family.modules:
            assert "no extra" in line
        elif family.installed:
            assert "installed" in line and "not installed" not in line
        elif family.install:  # no pip extra can install it
            assert f"not installed: {family.install}" in line
        else:
            assert f'not installed: pip install -c constraints.txt -e ".[{family.extra}]"' in line


def test_env_family_examples_resolve():
    from marllib_ext.envs import get_env_spec
    from marllib_ext.envs.by_name import ENV_FAMILIES

    for family in ENV_FAMILIES[:2]:  # pz (mpe2) and lbf need nothing beyond the test extra
        assert get_env_spec(family.example.split()[0]).name == family.example.split()[0]


@pytest.mark.parametrize(
    "args,message",
    [
        (["train", "mappo", "--env", "mpe:simple_sprad"], "unknown env 'mpe:simple_sprad'"),
        (["train", "mapo"], "unknown algorithm 'mapo'"),
        (["train", "mappo", "--set", "lrr=0.1"], "unknown config key 'lrr'"),
        (["train", "mappo", "--set", "num_epochs=many"], "config key 'num_epochs' must be int"),
        (
            ["train", "mappo", "--env", "mpe:simple_speaker_listener", "--share-policy", "all"],
            "share_policy='all' is not allowed",
        ),
        (
            ["train", "qmix", "--env-arg", "continuous_actions=true"],
            "qmix supports discrete actions only",
        ),
        (["train", "maddpg"], "maddpg supports continuous (Box) actions only"),
        (
            ["train", "matrpo", "--set", "entropy_coeff=0.05"],
            "entropy_coeff is not used by matrpo: its actors take trust-region steps",
        ),
        (["train", "itrpo", "--set", "lr=0.001"], "lr is not used by itrpo: "),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, args, message):
    result = run_cli(*args, "--local-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()  # nothing was started or written


@pytest.mark.slow  # test_efx.py evaluates at a chosen budget in-process by default
def test_evaluate_an_efx_checkpoint_at_a_chosen_budget(tmp_path):
    trained = run_cli(
        "train",
        "efx_mappo",
        "--env",
        "toy:coordination",
        "--stop-iters",
        "1",
        "--set",
        "num_env_runners=0",
        "--num-cpus",
        "2",
        "--local-dir",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    checkpoint = trained.stdout.split("checkpoint: ")[1].split()[0]
    result = run_cli(
        "evaluate", checkpoint, "--z", "4", "--episodes", "3", "--num-cpus", "2", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "evaluated 3 episodes at budget z=4" in result.stdout
    assert "team return mean" in result.stdout


@pytest.mark.slow  # tests/test_sweeps.py runs the sweep in-process by default
def test_tune_sweep_prints_a_results_table(tmp_path):
    result = run_cli(
        "tune",
        "mappo",
        "--env",
        "toy:coordination",
        "--grid",
        "lr=0.001,0.0005",
        "--stop-iters",
        "1",
        "--set",
        "num_env_runners=0",
        "--num-cpus",
        "2",
        "--local-dir",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if "agent_return" in line)
    rows = lines[header + 1 : header + 3]
    assert len(rows) == 2 and {"0.001", "0.0005"} <= {row.split()[0] for row in rows}


@pytest.mark.slow  # a CLI run of its own (15 s); the default tier trains through the CLI above
def test_train_starts_its_own_ray_despite_a_dead_cluster_address(tmp_path):
    """An earlier `ray start` whose cluster died leaves its address in Ray's temp dir;
    without --address or RAY_ADDRESS, train must start a local Ray, not retry it."""
    import os
    import shutil
    import tempfile

    temp_root = tempfile.mkdtemp(prefix="mx", dir="/tmp")  # short: Ray's socket paths
    try:
        ray_dir = Path(temp_root, "ray")
        ray_dir.mkdir()
        (ray_dir / "ray_current_cluster").write_text("127.0.0.1:1")  # nothing listens
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        result = subprocess.run(
            [sys.executable, "-m", "marllib_ext.cli", "train", "ippo", "--env",
             "toy:coordination", "--stop-iters", "1", "--set", "num_env_runners=0",
             "--num-cpus", "1", "--local-dir", str(tmp_path)],
            cwd=tmp_path, capture_output=True, text=True, timeout=240,
            env={**env, "TMPDIR": temp_root},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        assert "checkpoint" in result.stdout
    finally:
        shutil.rmtree(temp_root, ignore_errors=True)
