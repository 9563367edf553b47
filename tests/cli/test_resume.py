"""``train --resume`` continues the run its checkpoint belongs to, and nothing else."""

import subprocess
from pathlib import Path

import yaml

from tests.cli.test_cli import run_cli as cli


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return cli(*args, "--num-cpus", "2", cwd=cwd)


def test_resume_continues_its_own_run_and_refuses_another(tmp_path):
    first = run_cli(
        "train", "mappo", "--env", "mpe:simple_speaker_listener", "--share-policy",
        "individual", "--stop-iters", "1", "--set", "num_env_runners=0", "--seed", "2",
        cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint = Path(tmp_path, first.stdout.split("checkpoint: ")[1].split()[0])
    saved = yaml.safe_load((checkpoint / "config.yaml").read_text())
    assert saved["algo"] == "mappo" and saved["share_policy"] == "individual"

    before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    for args, message in [
        (["ippo"], "algo 'ippo' conflicts with the checkpoint's run (algo 'mappo')"),
        (["--env", "mpe:simple_spread"], "env 'mpe:simple_spread' conflicts"),
        (["--set", "lr=0.1"], "--set lr=0.1 conflicts with the checkpoint's run"),
    ]:
        refused = run_cli("train", *args, "--resume", str(checkpoint), cwd=tmp_path)
        assert refused.returncode == 2
        lines = refused.stderr.strip().splitlines()
        assert lines[-1].startswith("marllib-ext: error: ") and message in lines[-1]
        assert not any("Traceback" in line for line in lines)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before  # nothing written

    resumed = run_cli("train", "--resume", str(checkpoint), "--stop-iters", "2", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        "training mappo on mpe:simple_speaker_listener (share_policy=individual" in resumed.stdout
    )
    rows = [line for line in resumed.stdout.splitlines() if line.startswith("iter")]
    assert len(rows) == 1 and rows[0].startswith("iter    2")
    new_run = Path(tmp_path, resumed.stdout.split("checkpoint: ")[1].split()[0]).parent
    assert yaml.safe_load((new_run / "config.yaml").read_text())["seed"] == 2


def test_print_config_resolves_a_run_file(tmp_path):
    (tmp_path / "run.yaml").write_text(
        "algo: happo\nenv: mpe:simple_spread\nset: {lr: 0.001}\nstop: {env_steps: 5000}\n"
    )
    result = run_cli("train", "--config", "run.yaml", "--seed", "4", "--print-config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = yaml.safe_load(result.stdout.split("\n", 1)[1])  # after the threads line
    assert printed["share_policy"] == "individual"  # what happo needs on one team
    assert printed["seed"] == 4 and printed["settings"]["lr"] == 0.001
    assert printed["stop"] == {"env_steps": 5000} and printed["source"] == "mpe"
    assert not (tmp_path / "runs").exists()
    bad = run_cli("train", "--config", "run.yaml", "--print-config", "--set", "lrr=1", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown config key 'lrr'" in bad.stderr
