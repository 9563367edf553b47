"""Feature normalization (a LayerNorm on the inputs): the actor's outputs are the
default module's on normalized observations, the central critic's first layer, the
weights the env runners act with, and the modules that refuse it."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

from marllib_ext import algos
from marllib_ext.errors import ConfigError
from marllib_ext.policies.feature_norm import FeatureNormActor
from marllib_ext.policies.joint_critic import CRITIC_MODULE_ID
from marllib_ext.rllib_compat import local_learner, plain_module

SPACES = {
    "observation_space": gym.spaces.Box(-10, 10, (4,), np.float32),
    "action_space": gym.spaces.Discrete(3),
    "model_config": dataclasses.asdict(DefaultModelConfig(fcnet_hiddens=[8])),
}


def test_the_actor_is_the_default_module_on_layer_normalized_observations():
    torch.manual_seed(0)
    actor = FeatureNormActor(**SPACES)
    plain = DefaultPPOTorchRLModule(**SPACES)
    plain.load_state_dict(
        {k: v for k, v in actor.state_dict().items() if not k.startswith("feature_norm.")}
    )
    with torch.no_grad():
        actor.feature_norm.weight.uniform_(0.5, 2.0)
        actor.feature_norm.bias.uniform_(-1.0, 1.0)
        obs = torch.randn(6, 4) * 5 + 3
        expected_obs = torch.nn.functional.layer_norm(
            obs, (4,), actor.feature_norm.weight, actor.feature_norm.bias
        )
        got = actor.forward_train({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
        want = plain.forward_train({Columns.OBS: expected_obs})[Columns.ACTION_DIST_INPUTS]
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(
            actor.compute_values({Columns.OBS: obs}),
            plain.compute_values({Columns.OBS: expected_obs}),
        )


def test_mappo_trains_with_normalized_inputs_and_the_runners_act_with_them(ray_session):
    config = algos.mappo(
        hyperparam_source="toy",
        num_env_runners=0,
        feature_norm=True,
        train_batch_size=100,
        minibatch_size=50,
    ).rllib_config("toy:coordination", seed=0)
    algorithm = config.build_algo()
    try:
        algorithm.train()
        learner = local_learner(algorithm)
        critic = plain_module(learner.module, CRITIC_MODULE_ID)
        assert isinstance(critic.value_net[0], torch.nn.LayerNorm)
        actor = plain_module(learner.module, "shared")
        assert isinstance(actor, FeatureNormActor)
        acting = algorithm.env_runner.module["shared"]
        torch.testing.assert_close(acting.feature_norm.bias, actor.feature_norm.bias)
        assert actor.feature_norm.bias.abs().sum() > 0  # it trained
    finally:
        algorithm.stop()


@pytest.mark.parametrize(
    "name,message",
    [
        ("vdppo", "feature_norm"),
        ("coma", "feature_norm"),
        ("efx_mappo", "efx_mappo does not support feature_norm yet"),
    ],
)
def test_modules_without_support_refuse_it(name, message):
    with pytest.raises(ConfigError, match=message):
        algos.get(name, feature_norm=True).rllib_config("toy:coordination")
