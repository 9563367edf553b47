"""The reference initialization: orthogonal layers with their gains, the Gaussian's
initial std, on the learner and on the env runners after the first weight sync."""

import dataclasses
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

from marllib_ext import algos
from marllib_ext.errors import ConfigError
from marllib_ext.policies.initialization import orthogonal_init, set_initial_std
from marllib_ext.rllib_compat import local_learner, plain_module


def ppo_module(**model_config):
    return DefaultPPOTorchRLModule(
        observation_space=gym.spaces.Box(-1, 1, (5,), np.float32),
        action_space=gym.spaces.Box(-1, 1, (2,), np.float32),
        model_config=dataclasses.asdict(
            DefaultModelConfig(fcnet_hiddens=[8, 8], free_log_std=True, **model_config)
        ),
    )


def singular_values(weight):
    return torch.linalg.svdvals(weight.detach())


def test_orthogonal_layers_with_their_gains_and_zero_biases():
    module = ppo_module(vf_share_layers=False)
    orthogonal_init(
        module, hidden_gain=2.0, action_head_gain=0.01, generator=torch.Generator().manual_seed(0)
    )
    gains = {}
    for name, layer in module.named_modules():
        if isinstance(layer, torch.nn.Linear):
            assert torch.all(layer.bias == 0), name
            values = singular_values(layer.weight)
            torch.testing.assert_close(values, torch.full_like(values, values[0]))
            gains[name] = float(values[0])
    assert gains["pi.net.mlp.0"] == pytest.approx(0.01, rel=1e-5)  # the action head
    assert gains["vf.net.mlp.0"] == pytest.approx(1.0, rel=1e-5)  # the value head
    hidden = [g for n, g in gains.items() if n.startswith("encoder.")]
    assert len(hidden) == 4 and all(g == pytest.approx(2.0, rel=1e-5) for g in hidden)


def test_initial_std_literal_and_its_need_for_a_free_log_std():
    module = ppo_module()
    set_initial_std(module, 0.37)
    torch.testing.assert_close(module.pi.log_std, torch.full((2,), math.log(0.37)))
    with pytest.raises(ConfigError, match="initial_std"):
        algos.mappo(initial_std=0.37, free_log_std=False).settings("toy:coordination")


def test_the_env_runners_act_with_the_initialized_weights(ray_session):
    config = algos.ippo(
        hyperparam_source="toy",
        num_env_runners=0,
        free_log_std=True,
        orthogonal_init=True,
        initial_std=0.37,
        train_batch_size=100,
        minibatch_size=50,
    ).rllib_config("toy:continuous_target", seed=3)
    algorithm = config.build_algo()
    try:
        learner = local_learner(algorithm)
        module_id = sorted(learner.module.keys())[0]
        trained = plain_module(learner.module, module_id)
        acting = algorithm.env_runner.module[module_id]
        log_std = trained.pi.log_std
        torch.testing.assert_close(log_std, torch.full_like(log_std, math.log(0.37)))
        torch.testing.assert_close(acting.pi.log_std, log_std)
        head = trained.pi.net.mlp[0].weight
        assert float(singular_values(head)[0]) == pytest.approx(0.01, rel=1e-4)
        torch.testing.assert_close(acting.pi.net.mlp[0].weight, head)
        algorithm.train()
    finally:
        algorithm.stop()
