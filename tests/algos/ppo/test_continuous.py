"""Continuous actions (seed 001 PPO core): Gaussian log-prob, learning, EFX budget."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext import algos
from marllib_ext.algos.ppo.builders import actor_model_config
from marllib_ext.envs.toy import ContinuousTargetEnv
from marllib_ext.ops.efx import budget_path, intrinsic_rewards


def test_gaussian_logp_is_the_closed_form_with_state_independent_log_std():
    settings = algos.mappo(free_log_std=True, actor_hiddens=[8]).settings("toy:continuous_target")
    module = RLModuleSpec(
        # The actor class our configs get: RLlib's default PPO module.
        module_class=PPOConfig().get_default_rl_module_spec().module_class,
        observation_space=gym.spaces.Box(-1, 1, (2,)),
        action_space=gym.spaces.Box(-1, 1, (3,)),
        model_config=actor_model_config(settings),
    ).build()
    obs = torch.randn(5, 2)
    inputs = module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    mean, log_std = inputs[:, :3], inputs[:, 3:]
    assert torch.allclose(log_std, log_std[:1].expand_as(log_std))  # free log-std
    actions = torch.randn(5, 3)
    dist = module.get_train_action_dist_cls().from_logits(inputs)
    std = log_std.exp()
    closed_form = (
        -0.5 * ((actions - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    ).sum(dim=1)  # summed over action dimensions
    torch.testing.assert_close(dist.logp(actions), closed_form, rtol=1e-5, atol=1e-5)


def random_team_return(episodes=200):
    env, rng, total = ContinuousTargetEnv(), np.random.default_rng(0), 0.0
    for seed in range(episodes):
        env.reset(seed=seed)
        while env.agents:
            _, rewards, *_ = env.step({a: rng.uniform(-1, 1, (1,)) for a in env.agents})
            total += rewards["agent_0"]
    return total / episodes


@pytest.mark.slow  # a learning run; continuous actions train by default in other tests
def test_continuous_mappo_learns_beyond_random(ray_session, tmp_path):
    random_return = random_team_return()  # about -6.7 per agent
    result = algos.mappo(num_env_runners=0, free_log_std=True).fit(
        "toy:continuous_target",
        stop={"training_iteration": 25},
        seed=0,
        local_dir=tmp_path,
        checkpoint_end=False,
    )
    assert random_return < -6.0
    assert result.final["agent_return_mean"] > random_return + 1.5, result.progress


def test_negative_intrinsic_reward_of_a_peaked_density_raises_the_budget():
    # A density above 1 (e.g. a narrow Gaussian) has log pi > 0, so r_int = -c log pi < 0
    # and the budget grows instead of shrinking; the clip keeps it at z_high.
    _, delta = intrinsic_rewards(np.array([[1.2, 0.8], [1.5, 1.5]]), coef=1.0)
    assert (delta < 0).all()
    z = budget_path(np.append(delta, 0.0), z0=0.0, z_low=-5.0, z_high=4.0)
    np.testing.assert_allclose(z, [0.0, 2.0, 4.0])


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("ippo", marks=pytest.mark.slow),
        "efx_mappo",
        pytest.param("vdppo", marks=pytest.mark.slow),
    ],
)
def test_continuous_actions_run_for_every_pipeline(ray_session, tmp_path, name):
    result = algos.get(name, num_env_runners=0, free_log_std=True).fit(
        "toy:continuous_target",
        stop={"training_iteration": 1},
        local_dir=tmp_path,
        checkpoint_end=False,
    )
    assert math.isfinite(result.final["agent_return_mean"])
