"""The options added for the reference settings with two data-parallel learners and two
remote env runners: turn-taking envs sampled whole (``WholeEpisodeEnvRunner``) and the
bounded Gaussian with feature normalization. The learners stay identical and the
runners act with what the learners trained.

Remote runners ask for no CPU of their own here, so that two learners and two runners
fit the tests' 2-CPU Ray."""

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from marllib_ext import algos
from marllib_ext.policies.joint_critic import is_critic_module
from marllib_ext.rllib_compat import plain_module
from marllib_ext.rollout.whole_episodes import WholeEpisodeEnvRunner
from tests.data_parallel import assert_learners_identical

pytestmark = pytest.mark.slow  # remote runners and DDP learners: tens of seconds each


def build(config):
    config.env_runners(num_cpus_per_env_runner=0)
    return config.build_algo()


def test_turn_taking_env_sampled_whole_by_remote_runners_trains_two_learners(ray_session):
    pytest.importorskip("pyspiel", reason="the hanabi extra is not installed")
    config = algos.mappo(
        num_learners=2,
        num_env_runners=2,
        num_envs_per_env_runner=2,
        train_batch_size=200,
        minibatch_size=100,
        num_epochs=1,
    ).rllib_config("hanabi:small", seed=0)
    assert config.env_runner_cls is WholeEpisodeEnvRunner
    algorithm = build(config)
    try:
        for _ in range(2):
            result = algorithm.train()
        runner_classes = algorithm.env_runner_group.foreach_env_runner(
            lambda runner: type(runner).__name__, local_env_runner=False
        )
        assert runner_classes == ["WholeEpisodeEnvRunner"] * 2
        # Whole games only: every returned episode ended, none was cut and dropped.
        assert result["env_runners"]["num_env_steps_sampled"] >= 200
        assert result["env_runners"]["num_episodes"] >= 2
        assert_learners_identical(algorithm)
    finally:
        algorithm.stop()


def test_bounded_std_with_feature_norm_stays_bounded_on_two_learners(ray_session):
    config = algos.mappo(
        hyperparam_source="toy",
        num_learners=2,
        num_env_runners=2,
        free_log_std=True,
        initial_std=0.3,
        std_bound=0.5,
        feature_norm=True,
        entropy_coeff=1.0,  # pushes the std up against its bound
        train_batch_size=200,
        minibatch_size=100,
    ).rllib_config("toy:continuous_target", seed=0)
    algorithm = build(config)
    try:
        for _ in range(2):
            algorithm.train()
        assert_learners_identical(algorithm)

        def stds(runner):
            # The actor: a learner also holds the joint critic, first in sorted order.
            actor_id = next(m for m in sorted(runner.module.keys()) if not is_critic_module(m))
            module = plain_module(runner.module, actor_id)
            obs = torch.zeros(1, *module.observation_space.shape)
            with torch.no_grad():
                inputs = module.forward_inference({Columns.OBS: obs})
            return inputs[Columns.ACTION_DIST_INPUTS].chunk(2, -1)[1].exp().numpy()

        remote = algorithm.env_runner_group.foreach_env_runner(stds, local_env_runner=False)
        learner_std = algorithm.learner_group.foreach_learner(
            lambda learner: stds(learner)  # a learner holds .module like a runner
        )
        learned = [ref.get() for ref in learner_std]
        for std in [*remote, *learned]:
            assert np.all(std < 0.5)
        # Trained past the start, and the runners act with the learners' std.
        assert not np.allclose(learned[0], 0.3)
        np.testing.assert_allclose(remote[0], learned[0], rtol=1e-5)
        np.testing.assert_allclose(remote[1], learned[0], rtol=1e-5)
    finally:
        algorithm.stop()
