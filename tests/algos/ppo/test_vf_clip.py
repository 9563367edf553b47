"""``vf_clip_param`` is honoured by the joint critics, as RLlib's PPO clamps its value
loss: each squared error is clamped at the value; ``null`` leaves it unclamped."""

import pytest
import torch
from ray.rllib.core.learner.learner import VF_LOSS_KEY

from marllib_ext import algos
from marllib_ext.algos.ppo.learners import masked_value_loss
from marllib_ext.policies import CRITIC_MODULE_ID


def test_masked_value_loss_clamps_each_squared_error():
    values = torch.tensor([0.0, 0.0, 0.0, 5.0])
    targets = torch.tensor([1.0, 20.0, -3.0, 0.0])
    mask = torch.tensor([True, True, True, False])  # the last row is a bootstrap row
    clipped, _ = masked_value_loss(values, targets, mask, clip=4.0)
    assert float(clipped) == pytest.approx((1.0 + 4.0 + 4.0) / 3)
    unclipped, _ = masked_value_loss(values, targets, mask, clip=None)
    assert float(unclipped) == pytest.approx((1.0 + 400.0 + 9.0) / 3)


def test_joint_critic_defaults_leave_the_loss_unclamped_and_ippo_keeps_rllibs():
    assert algos.mappo().settings("toy:coordination").vf_clip_param is None
    assert algos.vdppo().settings("toy:coordination").vf_clip_param is None
    assert algos.ippo().settings("toy:coordination").vf_clip_param == 100.0


@pytest.mark.parametrize("name", ["mappo", "vdppo"])
def test_a_small_vf_clip_param_bounds_the_critic_loss(ray_session, name):
    config = algos.get(
        name,
        "toy",
        vf_clip_param=1e-3,
        num_env_runners=0,
        train_batch_size=100,
        minibatch_size=50,
        num_epochs=1,
    ).rllib_config("toy:coordination", seed=0)
    algorithm = config.build_algo()
    try:
        result = algorithm.train()
    finally:
        algorithm.stop()
    assert 0.0 < result["learners"][CRITIC_MODULE_ID][VF_LOSS_KEY] <= 1e-3 * (1 + 1e-6)
