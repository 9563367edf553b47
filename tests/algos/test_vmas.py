"""Training on VMAS (extra vmas): each env runner samples from one batched VMAS
simulator of num_envs_per_env_runner worlds."""

import math
import subprocess
import sys

import pytest

from marllib_ext import algos, make_env
from marllib_ext.envs.batched import BatchedVectorEnv
from marllib_ext.rollout.env_runner import BatchedEnvRunner

pytest.importorskip("vmas", reason="the vmas extra is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SMALL = {"train_batch_size": 400, "minibatch_size": 200, "num_epochs": 1}


def _world_sizes(algorithm):
    return algorithm.env_runner_group.foreach_env_runner(
        lambda runner: (type(runner.env).__name__, runner.env.world.num_envs),
        local_env_runner=algorithm.config.num_env_runners == 0,
    )


@pytest.mark.parametrize("num_env_runners", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_mappo_samples_from_one_batched_world_per_runner(ray_session, num_env_runners):
    config = algos.mappo(hyperparam_source="vmas", **SMALL).rllib_config(
        "vmas:navigation", seed=0, num_env_runners=num_env_runners, num_envs_per_env_runner=5
    )
    assert config.env_runner_cls is BatchedEnvRunner
    algorithm = config.build_algo()
    try:
        assert _world_sizes(algorithm) == [(BatchedVectorEnv.__name__, 5)]
        result = algorithm.train()
        assert result["env_runners"]["num_env_steps_sampled"] == 400
        result = algorithm.train()
        assert math.isfinite(result["env_runners"]["episode_return_mean"])
    finally:
        algorithm.stop()


@pytest.mark.parametrize(
    ("name", "env_args", "settings"),
    [
        ("ippo", {"continuous_actions": False}, SMALL),
        pytest.param(
            "maddpg",
            {"max_steps": 20},
            {"learning_starts": 2, "batch_episode": 4},
            marks=pytest.mark.slow,
        ),  # fmt: skip
    ],
)
def test_trains_on_vmas(ray_session, tmp_path, name, env_args, settings):
    env = make_env("vmas:navigation", **env_args)
    result = algos.get(name, hyperparam_source="vmas", num_envs_per_env_runner=4, **settings).fit(
        env, stop={"training_iteration": 2}, local_dir=tmp_path
    )
    assert result.final["training_iteration"] == 2
    assert math.isfinite(result.final["agent_return_mean"])


def test_a_checkpoint_of_a_by_name_env_evaluates_in_a_fresh_process(ray_session, tmp_path):
    result = algos.mappo(hyperparam_source="vmas", num_envs_per_env_runner=4, **SMALL).fit(
        make_env("vmas:navigation", max_steps=20), stop={"training_iteration": 1},
        local_dir=tmp_path,
    )  # fmt: skip
    # A new process has not built vmas:navigation: the checkpoint's env id registers it.
    evaluated = subprocess.run(
        [sys.executable, "-m", "marllib_ext.cli", "evaluate", str(result.checkpoint_path),
         "--episodes", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "team return mean" in evaluated.stdout
