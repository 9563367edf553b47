"""Checkpoints written by the flat layout (every algorithm in ``algos/*.py``) still
load, evaluate and resume. ``tests/data/flat_layout_checkpoints`` holds three made
with that version: ``mappo``, ``efx_mappo`` and ``qmix`` on ``toy:coordination``
(2 iterations, seed 0)."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from marllib_ext import algos
from marllib_ext.algos.evaluation import evaluate
from marllib_ext.legacy_paths import legacy_attribute

DATA = Path(__file__).resolve().parents[1] / "data" / "flat_layout_checkpoints"
SMALL = {
    "mappo": {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1},
    "efx_mappo": {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1},
    "qmix": {"batch_episode": 4, "buffer_size": 8},
}


@pytest.fixture
def checkpoint(request, tmp_path):
    """A copy, so that nothing a test does touches the stored checkpoint."""
    copy = tmp_path / request.param
    shutil.copytree(DATA / request.param, copy)
    return copy


@pytest.mark.parametrize(
    "checkpoint",
    ["mappo", pytest.param("efx_mappo", marks=pytest.mark.slow), "qmix"],
    indirect=True,
)
def test_a_flat_layout_checkpoint_evaluates(ray_session, checkpoint):
    result = evaluate(checkpoint, episodes=4)
    assert len(result.team_returns) == 4
    assert np.isfinite(result.team_return_mean)


@pytest.mark.parametrize(
    "checkpoint",
    ["mappo", pytest.param("efx_mappo", marks=pytest.mark.slow), "qmix"],
    indirect=True,
)
def test_a_flat_layout_checkpoint_resumes_where_it_stopped(ray_session, checkpoint, tmp_path):
    name = checkpoint.name
    result = algos.get(name).fit(
        "toy:coordination",
        stop={"training_iteration": 3},
        seed=0,
        local_dir=tmp_path / "runs",
        resume_from=checkpoint,
        tensorboard=False,
        num_envs_per_env_runner=2,
        **SMALL[name],
    )
    assert [row["training_iteration"] for row in result.progress] == [3]
    assert result.progress[0]["timesteps_total"] > 0


def test_old_paths_resolve_to_the_moved_objects():
    from marllib_ext.algos.efx.builders import budget_connector_factory
    from marllib_ext.algos.ppo.learners import JointCriticPPOLearner

    assert legacy_attribute("marllib_ext.algos.learners", "JointCriticPPOLearner") is (
        JointCriticPPOLearner
    )
    assert legacy_attribute("marllib_ext.algos.efx", "_budget_connector_factory") is (
        budget_connector_factory
    )
    old = legacy_attribute("marllib_ext.algos.joint_q", "JointQLearner")
    assert old.__module__ == "marllib_ext.algos.team_replay.legacy"


def test_an_unknown_old_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NoSuchThing"):
        legacy_attribute("marllib_ext.algos.learners", "NoSuchThing")
