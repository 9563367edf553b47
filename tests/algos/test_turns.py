"""Training on turn-taking envs: the toy AEC game, and 2-player Hanabi (extra)."""

import math

import pytest

from marllib_ext import algos

SETTINGS = {
    "mappo": {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1},
    "ippo": {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1},
    "qmix": {"learning_starts": 2, "batch_episode": 4},
}


@pytest.mark.parametrize(
    ("name", "env"),
    [
        ("mappo", "toy:take_turns"),
        pytest.param("ippo", "toy:take_turns", marks=pytest.mark.slow),
        pytest.param("qmix", "toy:take_turns", marks=pytest.mark.slow),
        *[pytest.param(n, "hanabi:small", marks=pytest.mark.slow) for n in SETTINGS],
    ],
)
def test_trains_on_a_turn_taking_env(ray_session, tmp_path, name, env):
    if env.startswith("hanabi:"):
        pytest.importorskip("pyspiel", reason="the hanabi extra is not installed")
    result = algos.get(name, hyperparam_source="toy", num_env_runners=0, **SETTINGS[name]).fit(
        env, stop={"training_iteration": 2}, local_dir=tmp_path
    )
    assert result.final["training_iteration"] == 2
    assert math.isfinite(result.final["agent_return_mean"])
