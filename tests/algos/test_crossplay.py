"""Cross-play: two runs' checkpoints play one team (``evaluate --partner``,
``report --crossplay``)."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from marllib_ext import algos
from marllib_ext.algos.evaluation.crossplay import (
    PARTNER_PREFIX,
    CrossplayMatrix,
    checkpoint_mapping,
    crossplay,
    crossplay_matrix,
    default_partner_agents,
    partnered_algorithm,
    write_crossplay,
)
from marllib_ext.algos.restore import restored_algorithm
from marllib_ext.cli import main
from marllib_ext.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def two_runs(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("crossplay")
    runs = []
    for seed in (0, 1):
        result = algos.mappo(num_env_runners=0, train_batch_size=200, minibatch_size=100).fit(
            "toy:coordination", stop={"training_iteration": 1}, local_dir=out, seed=seed
        )
        runs.append(result)
    return runs


def _weights(module) -> dict[str, torch.Tensor]:
    """The acting weights (the runner's copy of the value head is never synced or used)."""
    return {k: v.detach().clone() for k, v in module.state_dict().items() if ".vf" not in f".{k}"}


def test_the_partner_slots_play_the_other_runs_weights(two_runs):
    own, partner = (run.checkpoint_path for run in two_runs)
    mapping = checkpoint_mapping(own)
    (slot,) = default_partner_agents(mapping)
    (other,) = sorted(set(mapping) - {slot})
    with restored_algorithm(partner) as algorithm:
        theirs = _weights(algorithm.env_runner.module[mapping[slot]])
    with restored_algorithm(own) as algorithm:
        mine = _weights(algorithm.env_runner.module[mapping[other]])
    with partnered_algorithm(own, partner) as algorithm:
        runner = algorithm.env_runner
        mapping_fn = runner.config.policy_mapping_fn
        assert mapping_fn(slot) == PARTNER_PREFIX + mapping[slot]
        assert mapping_fn(other) == mapping[other]
        played = _weights(runner.module[PARTNER_PREFIX + mapping[slot]])
        kept = _weights(runner.module[mapping[other]])
    assert played.keys() == theirs.keys()
    for key in theirs:
        torch.testing.assert_close(played[key], theirs[key])
        torch.testing.assert_close(kept[key], mine[key])
    assert any(not torch.equal(theirs[k], mine[k]) for k in theirs)  # two different seeds


def test_crossplay_plays_complete_episodes_and_the_matrix_has_self_play_on_its_diagonal(
    two_runs, tmp_path
):
    own, partner = (run.checkpoint_path for run in two_runs)
    result = crossplay(own, partner, episodes=3)
    assert len(result.team_returns) == 3
    matrix = crossplay_matrix([own, partner], labels=["a", "b"], episodes=2)
    assert matrix.returns.shape == (2, 2) and np.isfinite(matrix.returns).all()
    path = write_crossplay(matrix, tmp_path)
    assert "| a |" in path.read_text() and (tmp_path / "crossplay.png").exists()


def test_partner_slots_must_be_some_of_the_agents(two_runs):
    own, partner = (run.checkpoint_path for run in two_runs)
    agents = sorted(checkpoint_mapping(own))
    with pytest.raises(ConfigError, match="--partner-agents"):
        crossplay(own, partner, partner_agents=agents, episodes=1)
    with pytest.raises(ConfigError, match="--partner-agents"):
        crossplay(own, partner, partner_agents=["nobody"], episodes=1)


def test_report_crossplay_from_the_command_line(two_runs, tmp_path):
    runs = [str(run.run_dir) for run in two_runs]
    command = [sys.executable, "-m", "marllib_ext.cli", "report", "--crossplay", *runs]
    command += ["--out", str(tmp_path), "--episodes", "1", "--num-cpus", "1", "--threads", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)  # its own Ray
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cross-play mean" in done.stdout
    assert (tmp_path / "crossplay.md").exists()


def test_partner_flags_that_cannot_go_together_are_refused(two_runs, capsys):
    own, partner = (str(run.checkpoint_path) for run in two_runs)
    assert main(["evaluate", own, "--partner", partner, "--z", "1.0"]) == 2
    assert "--partner plays two runs together" in capsys.readouterr().err
    assert main(["evaluate", own, "--partner-agents", "agent_1"]) == 2
    assert "--partner-agents needs --partner" in capsys.readouterr().err


def test_self_and_cross_play_means():
    matrix = CrossplayMatrix(["a", "b", "c"], np.arange(9.0).reshape(3, 3), ["agent_1"], 1)
    assert matrix.self_play == pytest.approx((0 + 4 + 8) / 3)
    assert matrix.cross_play == pytest.approx((1 + 2 + 3 + 5 + 6 + 7) / 6)
    assert default_partner_agents(["agent_2", "agent_0", "agent_1", "agent_3"]) == [
        "agent_2",
        "agent_3",
    ]
