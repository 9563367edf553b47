"""``masac`` and ``hasac`` from the command line, on one learner and on two
data-parallel learners: train with a checkpoint, continue the run, and evaluate the
checkpoint with the mean action."""

from pathlib import Path

import pytest

from tests.cli.test_cli import run_cli as cli

SMALL = ["learning_starts=2", "batch_episode=2", "actor_hiddens=[16]", "critic_hiddens=[16]"]


def run_cli(*args: str, cwd: Path, cpus: int = 2):
    return cli(*args, "--num-cpus", str(cpus), cwd=cwd)


@pytest.mark.parametrize(
    ("name", "learners"),
    [
        ("masac", 0),
        pytest.param("hasac", 0, marks=pytest.mark.slow),
        pytest.param("masac", 2, marks=pytest.mark.slow),
        pytest.param("hasac", 2, marks=pytest.mark.slow),
    ],
)
def test_train_resume_and_evaluate(tmp_path, name, learners):
    values = ["num_env_runners=0", f"num_learners={learners}", *SMALL]
    sets = [arg for value in values for arg in ("--set", value)]
    cpus = max(2, 1 + learners)  # the run's driver and one CPU per learner actor
    env = ["--env", "mpe:simple_spread", "--env-arg", "continuous_actions=true"]
    first = run_cli("train", name, *env, "--stop-iters", "2", *sets, cwd=tmp_path, cpus=cpus)
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint = Path(tmp_path, first.stdout.split("checkpoint: ")[1].split()[0])
    resumed = run_cli(
        "train", "--resume", str(checkpoint), "--stop-iters", "3", cwd=tmp_path, cpus=cpus
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = [line for line in resumed.stdout.splitlines() if line.startswith("iter")]
    assert len(rows) == 1 and rows[0].startswith("iter    3")
    evaluated = run_cli("evaluate", str(checkpoint), "--episodes", "2", cwd=tmp_path, cpus=cpus)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "team return mean" in evaluated.stdout
