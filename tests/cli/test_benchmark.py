"""``marllib-ext benchmark``: a 2 x 2 x 2 grid end to end, run again without training
anything (with and without Tune's state), and stopped in the middle then continued
from the trials' checkpoints."""

import csv
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

GRID = {
    "name": "grid",
    # `mappo` on one task only (an entry's `tasks`): six trials, two algorithms per
    # task where the report compares them.
    "algorithms": [
        {"algo": "mappo", "tasks": ["toy:coordination"]},
        {"algo": "ippo", "label": "ippo_fast", "set": {"lr": 1e-3}},
    ],
    "tasks": ["toy:coordination", "toy:legal_moves"],
    "seeds": [0, 1],
    "stop": {"iterations": 2},
    "evaluation": {"every": 2, "episodes": 2},
    "resources": {"env_runners": 0},
}


def benchmark(file: Path, *args: str, wait: bool = True):
    command = [sys.executable, "-m", "marllib_ext.cli", "benchmark", str(file), "--num-cpus", "2"]
    command += ["--out", str(file.parent / "results"), "--progress-every", "2", *args]
    if not wait:
        return subprocess.Popen(
            command, cwd=file.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return subprocess.run(command, cwd=file.parent, capture_output=True, text=True, timeout=900)


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def iterations(run_dir: Path) -> list[int]:
    with open(run_dir / "progress.csv", newline="") as f:
        return [int(row["training_iteration"]) for row in csv.DictReader(f)]


def test_a_grid_runs_to_the_end_and_running_it_again_trains_nothing(tmp_path):
    file = write(tmp_path, GRID)
    first = benchmark(file)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    root = tmp_path / "results" / "grid"
    runs = sorted(
        p.parent for p in (root / "runs").rglob("config.yaml") if p.parent.name.startswith("seed_")
    )
    assert len(runs) == 6
    assert not (root / "runs/toy-legal_moves/mappo").exists()
    for run in runs:
        assert (run / "metrics.json").exists() and (run / "checkpoint").exists()
        assert iterations(run) == [1, 2]
        saved = yaml.safe_load((run / "config.yaml").read_text())
        assert saved["seed"] == int(run.name.removeprefix("seed_"))
    fast = yaml.safe_load((root / "runs/toy-legal_moves/ippo_fast/seed_1/config.yaml").read_text())
    assert fast["algo"] == "ippo" and fast["set"]["lr"] == 1e-3 and fast["env"] == "toy:legal_moves"
    summary = (root / "summary.md").read_text()
    assert "## toy:coordination" in summary and "## toy:legal_moves" in summary
    assert "`ippo_fast` | return |" in summary
    assert "| 2 |" in summary  # two seeds per cell
    assert "IQM" in (root / "report" / "report.md").read_text()
    assert first.stdout.count("trial done:") == 6

    written = {run: (run / "progress.csv").stat().st_mtime_ns for run in runs}
    again = benchmark(file)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "continuing experiment grid" in again.stdout
    assert "trial done:" not in again.stdout
    assert {run: (run / "progress.csv").stat().st_mtime_ns for run in runs} == written

    # Stored results checked out elsewhere: no Tune state, no checkpoints. The finished
    # runs are kept; a run cut short trains again from its start.
    shutil.rmtree(root / "tune")
    for run in runs:
        shutil.rmtree(run / "checkpoint")
    cut = root / "runs/toy-coordination/mappo/seed_1"
    lines = (cut / "progress.csv").read_text().splitlines(keepends=True)
    (cut / "progress.csv").write_text("".join(lines[:2]))
    fresh = benchmark(file)
    assert fresh.returncode == 0, fresh.stdout[-3000:] + fresh.stderr[-3000:]
    assert fresh.stdout.count("trial kept:") == 5
    assert fresh.stdout.count("trial done:") == 1
    assert "trial done: toy:coordination/mappo/seed_1" in fresh.stdout
    assert iterations(cut) == [1, 2]
    kept = {run: t for run, t in written.items() if run != cut}
    assert {run: (run / "progress.csv").stat().st_mtime_ns for run in kept} == kept

    changed = write(tmp_path, {**GRID, "seeds": [0, 1, 2]})
    refused = benchmark(changed)
    assert refused.returncode == 2
    assert "started with other seeds" in refused.stderr.strip().splitlines()[-1]


def test_a_stopped_experiment_continues_its_unfinished_trials_from_their_checkpoints(tmp_path):
    spec = {
        "name": "stopped",
        "algorithms": ["mappo"],
        "tasks": ["toy:coordination"],
        "seeds": [0, 1],
        "stop": {"iterations": 40},
        "checkpoint_every": 2,
        "resources": {"env_runners": 0},
    }
    file = write(tmp_path, spec)
    runs = tmp_path / "results" / "stopped" / "runs" / "toy-coordination" / "mappo"
    process = benchmark(file, "--max-concurrent", "1", wait=False)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # seed 0 done, seed 1 past a checkpoint
        if (runs / "seed_1" / "progress.csv").exists() and len(iterations(runs / "seed_1")) >= 6:
            break
        assert process.poll() is None, process.stdout.read()[-3000:]
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 130, output[-3000:]
    assert "trials unfinished; run the same command again" in output
    assert (runs / "seed_0" / "checkpoint").exists()
    assert not (runs / "seed_1" / "checkpoint").exists()
    finished = (runs / "seed_0" / "progress.csv").stat().st_mtime_ns

    again = benchmark(file)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("trial done:") == 1  # seed 1 only
    assert (runs / "seed_0" / "progress.csv").stat().st_mtime_ns == finished
    assert not (runs / "seed_0" / "resumes.txt").exists()
    for seed in ("seed_0", "seed_1"):
        assert iterations(runs / seed) == list(range(1, 41))
    resumed = (runs / "seed_1" / "resumes.txt").read_text().split()
    assert resumed[0] == "iteration" and int(resumed[1]) >= 2  # from a checkpoint, not from 0


BROKEN_ENV = '''
import math

from marllib_ext.envs import register_env
from marllib_ext.envs.toy import CoordinationEnv


class BreaksLater(CoordinationEnv):
    """A NaN reward for agent_1 once 500 env steps have run (the first iteration is clean)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.life = 0

    def step(self, actions):
        obs, rewards, terms, truncs, infos = super().step(actions)
        if self.life >= 500:
            rewards = {**rewards, "agent_1": math.nan}
        self.life += 1
        return obs, rewards, terms, truncs, infos


register_env("test:breaks_later", BreaksLater, max_episode_steps=25)
'''


def test_a_failed_trial_is_named_and_the_others_finish(tmp_path):
    (tmp_path / "broken_envs.py").write_text(BROKEN_ENV)
    spec = {
        "name": "one_fails",
        "algorithms": ["mappo"],
        "tasks": ["test:breaks_later", "toy:coordination"],
        "seeds": [0],
        "stop": {"iterations": 3},
        "resources": {"env_runners": 0},
    }
    file = write(tmp_path, spec)
    command = [sys.executable, "-m", "marllib_ext.cli", "--import", "broken_envs", "benchmark"]
    command += [str(file), "--num-cpus", "2", "--out", str(tmp_path / "results")]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    failed = [line for line in result.stderr.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 1 and failed[0].startswith("FAILED test:breaks_later/mappo/seed_0: ")
    assert "agent 'agent_1'" in failed[0]
    assert "trial done: toy:coordination/mappo/seed_0" in result.stdout
    summary = (tmp_path / "results" / "one_fails" / "summary.md").read_text()
    assert "## toy:coordination" in summary
