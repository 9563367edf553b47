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


@pytest.mark.parametrize("signal", ["rnd", pytest.param("count", marks=pytest.mark.slow)])
def test_efx_novelty_signals_on_the_batched_simulator(ray_session, tmp_path, signal):
    """``efx_mappo --set intrinsic_reward=...`` on one batched VMAS world: trains, its
    checkpoint resumes and evaluates at a chosen z."""
    from ray.rllib.algorithms.algorithm import Algorithm

    from marllib_ext.algos.evaluation import evaluate
    from marllib_ext.rllib_compat.settings import settings_of

    env = make_env("vmas:navigation", max_steps=20)
    config = algos.efx_mappo(
        hyperparam_source="vmas", intrinsic_reward=signal, count_hash="simhash", **SMALL
    ).rllib_config(env, seed=0, num_env_runners=0, num_envs_per_env_runner=4)
    assert config.env_runner_cls is BatchedEnvRunner
    algorithm = config.build_algo()
    try:
        result = algorithm.train()
        assert result["efx"]["budget_z"] >= 0
        algorithm.save_to_path(str(tmp_path / "checkpoint"))
    finally:
        algorithm.stop()
    restored = Algorithm.from_checkpoint(str(tmp_path / "checkpoint"))
    try:
        result = restored.train()
        assert math.isfinite(result["env_runners"]["episode_return_mean"])
    finally:
        restored.stop()
    z = 0.25 * settings_of(restored.config).z_high
    evaluation = evaluate(str(tmp_path / "checkpoint"), episodes=2, z=z)
    assert evaluation.budget_z == pytest.approx(z)


@pytest.mark.parametrize("name", ["masac", pytest.param("hasac", marks=pytest.mark.slow)])
def test_soft_actor_critics_learn_from_the_batched_simulators_arrays(ray_session, name):
    """masac / hasac on one batched VMAS world per runner: the team episodes come from
    the rollout's arrays, and updates run on them."""
    small = {
        "learning_starts": 2,
        "batch_episode": 2,
        "actor_hiddens": [16],
        "critic_hiddens": [16],
    }
    config = algos.get(name, **small).rllib_config(
        make_env("vmas:navigation", max_steps=20),
        seed=0,
        num_env_runners=0,
        num_envs_per_env_runner=4,
        share_policy="individual" if name == "hasac" else "all",
    )
    algorithm = config.build_algo()
    try:
        assert algorithm.env_runner.sampling == "sampling: team episodes from arrays"
        algorithm.train()
        result = algorithm.train()
        assert result["team_replay"]["updates"] == 4
        assert math.isfinite(result["learners"]["soft_critic"]["critic_loss"])
    finally:
        algorithm.stop()
