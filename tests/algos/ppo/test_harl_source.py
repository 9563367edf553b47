"""The ``harl`` hyperparameter source: HARL's tuned MaMuJoCo HalfCheetah-2x3 settings
(tuned_configs/mamujoco/HalfCheetah-v2-2x3/{mappo,happo,hatrpo}/config.json)."""

import pytest

from marllib_ext.algos.registry import ALGORITHMS

SHARED = {
    "gamma": 0.99,
    "lambda_": 0.95,
    "entropy_coeff": 0.01,
    "grad_clip": 10.0,
    "train_batch_size": 4000,  # n_rollout_threads 20 x episode_length 200
    "num_envs_per_env_runner": 20,
    "actor_hiddens": [128, 128, 128],
    "critic_hiddens": [128, 128, 128],
    "actor_activation": "relu",
    "critic_activation": "relu",
    "orthogonal_init": True,
    "action_head_gain": 0.01,
    "initial_std": 0.3655,  # sigmoid(std_x_coef=1) * std_y_coef=0.5
    "value_norm": True,
    "huber_delta": 10.0,
}
PPO_EPOCHS = {"lr": 0.0005, "num_epochs": 15, "minibatch_size": None, "clip_param": 0.05}


@pytest.mark.parametrize(
    "name,own",
    [
        ("mappo", {**PPO_EPOCHS, "value_clip": 0.05}),
        ("happo", {**PPO_EPOCHS, "value_clip": 0.05}),
        (
            "hatrpo",
            {
                "critic_lr": 0.0005,
                "critic_epochs": 5,
                "critic_minibatch_size": None,
                "kl_threshold": 0.01,
                "value_clip": 0.2,
            },
        ),
    ],
)
def test_harl_source_is_harls_tuned_halfcheetah_config(name, own):
    settings = ALGORITHMS[name].settings("harl")
    for key, value in {**SHARED, **own}.items():
        assert getattr(settings, key) == value, key
