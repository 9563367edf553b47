"""Value normalization, Huber and clipped value losses on the central critic: the
module's de-normalized values, the running moments after an update against the
batch's targets, the moments in checkpoints, and the families that refuse them."""

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from marllib_ext import algos
from marllib_ext.errors import ConfigError
from marllib_ext.ops.value_norm import mean_and_variance, update_moments
from marllib_ext.policies.joint_critic import (
    CRITIC_MODULE_ID,
    OLD_VALUES,
    STATE,
    VALUE_NORM_BETA,
    CentralValueCritic,
)
from marllib_ext.rllib_compat import local_learner, plain_module
from tests.helpers import CapturesTrainBatch

SMALL = {
    "hyperparam_source": "toy",
    "num_env_runners": 0,
    "train_batch_size": 100,
    "minibatch_size": None,  # one whole-batch step: one moments update per iteration
    "num_epochs": 1,
}


def critic(beta):
    import gymnasium as gym

    space = gym.spaces.Box(-1, 1, (4,), np.float32)
    return CentralValueCritic(
        observation_space=space,
        action_space=gym.spaces.Discrete(2),
        model_config={"state_dim": 4, "hiddens": [8], "activation": "tanh", VALUE_NORM_BETA: beta},
    )


def test_compute_values_are_the_network_outputs_de_normalized():
    module = critic(0.9)
    module.value_moments.copy_(torch.tensor([1.0, 10.0, 0.5], dtype=torch.float64))
    mu, var = mean_and_variance(module.moments())  # mu 2, var 16
    assert (float(mu), float(var)) == (2.0, 16.0)
    batch = {STATE: torch.randn(5, 4)}
    raw = module.raw_values(batch)
    torch.testing.assert_close(module.compute_values(batch), raw * 4.0 + 2.0)
    torch.testing.assert_close(module.normalized(module.compute_values(batch)), raw)
    assert "value_moments" in module.state_dict()
    plain = critic(None)
    assert "value_moments" not in plain.state_dict()
    torch.testing.assert_close(plain.compute_values(batch), plain.raw_values(batch))


def test_an_update_steps_the_moments_on_the_valid_targets_and_a_checkpoint_keeps_them(
    ray_session, tmp_path
):
    config = algos.mappo(value_norm=True, value_norm_beta=0.9, **SMALL).rllib_config(
        "toy:coordination", seed=0
    )
    capturing = type("Capturing", (CapturesTrainBatch, config.learner_class), {})
    algorithm = config.learners(learner_class=capturing).build_algo()
    try:
        algorithm.train()
        learner = local_learner(algorithm)
        columns = learner.last_train_batch.policy_batches[CRITIC_MODULE_ID]
        targets = columns[Columns.VALUE_TARGETS][columns[Columns.LOSS_MASK]].double().numpy()
        expected = update_moments((0.0, 0.0, 0.0), targets.mean(), np.square(targets).mean(), 0.9)
        module = plain_module(learner.module, CRITIC_MODULE_ID)
        np.testing.assert_allclose(module.value_moments.numpy(), expected, rtol=1e-6)
        path = algorithm.save_to_path(str(tmp_path / "checkpoint"))
    finally:
        algorithm.stop()
    restored = config.build_algo()
    try:
        restored.restore_from_path(path)
        module = plain_module(local_learner(restored).module, CRITIC_MODULE_ID)
        np.testing.assert_allclose(module.value_moments.numpy(), expected, rtol=1e-6)
    finally:
        restored.stop()


def test_huber_and_clipped_losses_train_on_the_sampled_values(ray_session):
    config = algos.mappo(value_clip=0.2, huber_delta=10.0, **SMALL).rllib_config(
        "toy:coordination", seed=0
    )
    capturing = type("Capturing", (CapturesTrainBatch, config.learner_class), {})
    algorithm = config.learners(learner_class=capturing).build_algo()
    try:
        result = algorithm.train()
        learner = local_learner(algorithm)
        columns = learner.last_train_batch.policy_batches[CRITIC_MODULE_ID]
        module = plain_module(learner.module, CRITIC_MODULE_ID)
    finally:
        algorithm.stop()
    assert OLD_VALUES in columns
    assert np.isfinite(result["learners"][CRITIC_MODULE_ID]["vf_loss"])
    # The old values are the critic's outputs when the batch was built (one step ago).
    assert not torch.allclose(module.raw_values(dict(columns)), columns[OLD_VALUES])


@pytest.mark.parametrize(
    "name,key,value",
    [("vdppo", "value_norm", True), ("coma", "value_norm", True), ("coma", "value_clip", 0.2)],
)
def test_critics_without_support_refuse_the_keys(name, key, value):
    with pytest.raises(ConfigError, match=key):
        algos.get(name, **{key: value}).settings("toy:coordination")


def test_critic_lr_is_the_joint_critics_own_learning_rate(ray_session):
    config = algos.mappo(lr=1e-4, critic_lr=2e-3, **SMALL).rllib_config("toy:coordination")
    algorithm = config.build_algo()
    try:
        learner = local_learner(algorithm)
        module_ids = list(learner.module.keys())
        rates = {m: learner.get_optimizer(m).param_groups[0]["lr"] for m in module_ids}
    finally:
        algorithm.stop()
    assert rates == {"shared": pytest.approx(1e-4), CRITIC_MODULE_ID: pytest.approx(2e-3)}


@pytest.mark.slow
def test_two_learners_keep_the_same_moments_and_weights(ray_session):
    from tests.data_parallel import assert_learners_identical, two_learner_algorithm

    algorithm = two_learner_algorithm(
        "mappo", value_norm=True, value_clip=0.2, huber_delta=10.0, feature_norm=True
    )
    try:
        for _ in range(2):
            algorithm.train()
        assert_learners_identical(algorithm)  # the moments are a buffer: in the state dict
        moments = [
            ref.get()
            for ref in algorithm.learner_group.foreach_learner(
                lambda learner: (
                    plain_module(learner.module, CRITIC_MODULE_ID).value_moments.numpy().copy()
                )
            )
        ]
    finally:
        algorithm.stop()
    assert moments[0][2] > 0  # stepped
    np.testing.assert_array_equal(moments[0], moments[1])
