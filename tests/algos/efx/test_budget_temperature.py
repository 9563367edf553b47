"""``budget_temperature``: EFX actors whose budget inputs scale their distribution inputs."""

import math

import pytest
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ACTOR, ENCODER_OUT

from marllib_ext import algos, make_env
from marllib_ext.errors import ConfigError
from marllib_ext.ops.budget_temperature import gated_log_beta, scale_distribution_inputs
from marllib_ext.policies.budget_actor import BudgetTemperatureActor
from marllib_ext.rllib_compat import local_learner

SMALL = {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1}


def test_scaling_literals():
    logits = torch.tensor([[1.0, -2.0, 0.5]])
    scaled = scale_distribution_inputs(logits, torch.tensor([[math.log(2.0)]]), discrete=True)
    torch.testing.assert_close(scaled, torch.tensor([[2.0, -4.0, 1.0]]))
    gaussian = torch.tensor([[0.3, -0.7, 0.1, 0.2]])  # means (0.3, -0.7), log stds (0.1, 0.2)
    scaled = scale_distribution_inputs(gaussian, torch.tensor([[0.5]]), discrete=False)
    torch.testing.assert_close(scaled, torch.tensor([[0.3, -0.7, -0.4, -0.3]]))


def test_gated_log_beta_literals_and_shape_check():
    raw = torch.tensor([[-2.0], [-2.0], [0.7]])
    budget = torch.tensor([[0.0], [0.5], [1.0]])
    torch.testing.assert_close(gated_log_beta(raw, budget), torch.tensor([[0.0], [-1.0], [0.7]]))
    with pytest.raises(ValueError, match="budget"):
        gated_log_beta(raw, budget[:, 0])


def plain_logits(module, batch):
    """The default PPO actor's distribution inputs: its encoder's actor output through
    its ``pi`` head, without the temperature."""
    return module.pi(module.encoder(batch)[ENCODER_OUT][ACTOR])


def test_actor_starts_as_the_default_actor_and_the_budget_sets_its_temperature(ray_session):
    env = make_env("mpe:simple_spread", max_cycles=10, time_feature=True)
    config = algos.get("efx_mappo", **SMALL).rllib_config(env, seed=0)  # on by default
    algo = config.build_algo()
    try:
        module = local_learner(algo).module["shared"]
        assert isinstance(module, BudgetTemperatureActor)
        assert module.temperature[0].in_features == 2  # time left and budget
        obs = torch.rand(6, module.observation_space.shape[0])
        batch = {Columns.OBS: obs}
        with torch.no_grad():
            default = plain_logits(module, batch)
            torch.testing.assert_close(
                module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS], default
            )
            # g = log 2 everywhere: beta = exp(u * log 2) with u the budget column, so
            # 2 where a full budget is left and 1 (the plain actor) where none is.
            module.temperature[-1].weight.zero_()
            module.temperature[-1].bias.fill_(math.log(2.0))
            obs[:3, -1], obs[3:, -1] = 1.0, 0.0
            default = plain_logits(module, batch)
            scaled = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
            torch.testing.assert_close(scaled[:3], 2.0 * default[:3])
            torch.testing.assert_close(scaled[3:], default[3:])
        algo.train()
        assert module.temperature[0].weight.grad is not None
    finally:
        algo.stop()


def test_without_the_time_feature_the_actor_reads_the_budget_column_only(ray_session):
    env = make_env("mpe:simple_spread", max_cycles=10)
    config = algos.get(
        "efx_mappo", budget_temperature=True, budget_temperature_hidden=8, **SMALL
    ).rllib_config(env, seed=0)
    algo = config.build_algo()
    try:
        module = local_learner(algo).module["shared"]
        assert module.temperature[0].in_features == 1
        assert module.temperature[0].out_features == 8
        assert isinstance(local_learner(algo).module["joint_critic"], torch.nn.Module)
    finally:
        algo.stop()


@pytest.mark.parametrize("value", ["yes", 1])
def test_budget_temperature_must_be_a_boolean(value):
    with pytest.raises(ConfigError, match="budget_temperature"):
        algos.get("efx_mappo", budget_temperature=value).rllib_config(
            make_env("mpe:simple_spread"), seed=0
        )


def test_budget_temperature_false_keeps_rllibs_default_actor():
    env = make_env("mpe:simple_spread", max_cycles=10)
    config = algos.get(
        "efx_mappo", budget_temperature=False, push_gradient="policy", **SMALL
    ).rllib_config(env, seed=0)
    specs = config.rl_module_spec.rl_module_specs
    assert specs["shared"].module_class is DefaultPPOTorchRLModule


def test_temperature_push_loss_literals():
    from marllib_ext.ops.budget_temperature import temperature_push_loss

    push = torch.tensor([1.0, -2.0, 0.5])
    logp_old = torch.log(torch.tensor([0.5, 0.5, 0.5]))
    # ratios 1.5, 0.5, 1.0: the first is clipped at 1.2 (positive push), the second at
    # 0.8 (negative push: min(0.5 * -2, 0.8 * -2) = -1.6)
    logp_new = torch.log(torch.tensor([0.75, 0.25, 0.5]))
    loss = temperature_push_loss(logp_new, logp_old, push, clip=0.2, mean=torch.mean)
    torch.testing.assert_close(loss, -torch.tensor((1.2 - 1.6 + 0.5) / 3))


def test_push_gradient_temperature_trains_the_temperature_only(ray_session):
    """The push's loss reaches the temperature network and no parameter of the plain
    actor; the learner reports it and PPO's advantages no longer carry it."""
    from marllib_ext.algos.efx.learners import PUSH_LOSS
    from marllib_ext.ops.budget_temperature import temperature_push_loss
    from marllib_ext.policies.budget_actor import TEMPERATURE_DIST_INPUTS

    env = make_env("grid:pass", size=5, max_steps=20)
    config = algos.get("efx_mappo", push_gradient="temperature", **SMALL).rllib_config(env, seed=0)
    algo = config.build_algo()
    try:
        result = algo.train()
        assert math.isfinite(result["learners"]["shared"][PUSH_LOSS])
        module = local_learner(algo).module["shared"]
        obs = torch.rand(8, module.observation_space.shape[0])
        obs[:, -1] = 0.7  # budget left: the temperature acts
        module.temperature[-1].weight.data.normal_()
        out = module.forward_train({Columns.OBS: obs})
        torch.testing.assert_close(out[TEMPERATURE_DIST_INPUTS], out[Columns.ACTION_DIST_INPUTS])
        dist = module.get_train_action_dist_cls().from_logits(out[TEMPERATURE_DIST_INPUTS])
        actions = torch.arange(8) % 5
        module.zero_grad()
        temperature_push_loss(
            dist.logp(actions), torch.full((8,), -1.6), torch.randn(8), clip=0.2, mean=torch.mean
        ).backward()
        temperature = {id(p) for p in module.temperature.parameters()}
        for parameter in module.parameters():
            if id(parameter) in temperature:
                assert parameter.grad is not None and parameter.grad.abs().sum() > 0
            else:
                assert parameter.grad is None or parameter.grad.abs().sum() == 0
    finally:
        algo.stop()


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("efx_mappo", {"push_gradient": "temperature", "budget_temperature": False}),
        ("efx_happo", {"push_gradient": "temperature"}),
        ("efx_mappo", {"push_gradient": "logits"}),
    ],
)
def test_push_gradient_temperature_is_refused_where_it_cannot_act(name, overrides):
    with pytest.raises(ConfigError, match="push_gradient"):
        algos.get(name, **overrides).rllib_config(
            make_env("toy:coordination"), share_policy="individual", seed=0
        )
