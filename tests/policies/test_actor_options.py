"""The actor options. Feature normalization (a LayerNorm on the inputs): the actor's
outputs are the default module's on normalized observations, the central critic's first
layer, the weights the env runners act with, and the modules that refuse it. The bounded
Gaussian std (``std_bound * sigmoid(p)``): literal values, the distribution RLlib builds
from it, its start, and a run whose runners act with it."""

import dataclasses
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

from marllib_ext import algos
from marllib_ext.errors import ConfigError
from marllib_ext.ops.gaussian import bounded_log_std, raw_for_std
from marllib_ext.policies.actor_options import (
    BoundedStdActor,
    FeatureNormActor,
    FeatureNormBoundedStdActor,
)
from marllib_ext.policies.initialization import set_initial_std
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


GAUSSIAN_SPACES = {
    "observation_space": gym.spaces.Box(-10, 10, (4,), np.float32),
    "action_space": gym.spaces.Box(-1, 1, (2,), np.float32),
    "model_config": {
        **dataclasses.asdict(DefaultModelConfig(fcnet_hiddens=[8], free_log_std=True)),
        "std_bound": 0.5,
    },
}


@pytest.mark.parametrize("actor_class", [BoundedStdActor, FeatureNormBoundedStdActor])
def test_the_bounded_actor_gives_rllib_a_gaussian_with_std_below_the_bound(actor_class):
    torch.manual_seed(0)
    actor = actor_class(**GAUSSIAN_SPACES)
    with torch.no_grad():
        actor.pi.log_std.copy_(torch.tensor([1.0, 4.0]))
    obs = torch.randn(5, 4)
    inputs = actor.forward_train({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    mean, log_std = inputs.chunk(2, dim=-1)
    want_std = torch.tensor([0.5 / (1 + math.exp(-1)), 0.5 / (1 + math.exp(-4))])
    torch.testing.assert_close(log_std.exp(), want_std.expand(5, 2))
    dist = actor.get_train_action_dist_cls().from_logits(inputs)
    actions = torch.randn(5, 2)
    want = torch.distributions.Normal(mean, want_std).log_prob(actions).sum(-1)
    torch.testing.assert_close(dist.logp(actions), want)
    explored = actor.forward_exploration({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(explored, inputs)
    set_initial_std(actor, 0.3, 0.5)
    inputs = actor.forward_train({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(inputs.chunk(2, -1)[1].exp(), torch.full((5, 2), 0.3))


def test_mappo_acts_with_the_bounded_std_on_its_runners(ray_session):
    config = algos.mappo(
        hyperparam_source="toy",
        num_env_runners=0,
        free_log_std=True,
        initial_std=0.3,
        std_bound=0.5,
        entropy_coeff=1.0,  # pushes the std up against its bound
        train_batch_size=100,
        minibatch_size=50,
    ).rllib_config("toy:continuous_target", seed=0)
    algorithm = config.build_algo()
    try:
        learner = local_learner(algorithm)
        module_id = next(m for m in sorted(learner.module.keys()) if m != CRITIC_MODULE_ID)
        actor = plain_module(learner.module, module_id)
        assert isinstance(actor, BoundedStdActor)
        torch.testing.assert_close(
            actor.pi.log_std, torch.full_like(actor.pi.log_std, raw_for_std(0.3, 0.5))
        )
        for _ in range(2):
            algorithm.train()
        acting = algorithm.env_runner.module[module_id]
        torch.testing.assert_close(acting.pi.log_std, actor.pi.log_std)
        std = bounded_log_std(actor.pi.log_std.detach(), 0.5).exp()
        assert torch.all(std > 0.3) and torch.all(std < 0.5)  # the bonus widened it, bounded
    finally:
        algorithm.stop()


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"std_bound": 0.5, "free_log_std": False}, "std_bound"),
        ({"std_bound": 0.5, "free_log_std": True, "initial_std": 0.6}, "initial_std"),
        ({"std_bound": -1.0, "free_log_std": True}, "std_bound"),
    ],
)
def test_bad_std_bound_settings_name_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        algos.mappo(**overrides).settings("toy:continuous_target")


@pytest.mark.parametrize(
    "overrides,named", [({"feature_norm": True}, "feature_norm"), ({"std_bound": 0.5}, "std_bound")]
)
def test_single_agent_envs_refuse_the_actor_options_by_name(overrides, named):
    with pytest.raises(ConfigError, match=f"^{named} on a single-agent env: not yet"):
        algos.ippo(free_log_std=True, **overrides).rllib_config("Pendulum-v1")
