"""EFX on a batched simulator: sampled as rollout blocks with the budget in the
rollout (``postprocessing.budget_arrays``), trained on the block batch, and driving
its outer loop from the episodes played at the deployment budget."""

import math

import pytest

from marllib_ext import algos, make_env
from marllib_ext.algos.efx import RESULT_KEY
from marllib_ext.policies.joint_critic import CRITIC_MODULE_ID
from marllib_ext.postprocessing.efx_advantage import (
    BINDING_FRACTION,
    BUDGET_MEAN,
    UNMET_ROW_FRACTION,
    Z0_MEAN,
)

pytest.importorskip("vmas", reason="the vmas extra is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_efx_trains_on_blocks_and_its_outer_loop_reads_them(ray_session):
    config = algos.efx_mappo(
        hyperparam_source="vmas", train_batch_size=400, minibatch_size=200, num_epochs=1,
        efx_advantage="demand_push", z_sampling="uniform", z_deploy_fraction=0.5,
        # a fresh policy collects about 8.5 per step, 170 per episode: budgets up to
        # 1000 leave most episodes short of theirs
        z_low=0.0, z_high=1000.0,
    ).rllib_config(
        make_env("vmas:navigation", max_steps=20), seed=3, num_env_runners=0,
        num_envs_per_env_runner=4,
    )  # fmt: skip
    algorithm = config.build_algo()
    try:
        budgets = []
        for _ in range(2):
            result = algorithm.train()
            budgets.append(result[RESULT_KEY]["budget_z"])
        assert algorithm.env_runner.sampling == "sampling: rollout blocks"
        assert result["learners"]["__all_modules__"]["block_batch_timer"] > 0
        efx = result[RESULT_KEY]
        # 20 episodes of 20 steps end per iteration, about half at the deployment budget
        assert 0 < efx["deploy_episodes"] < 20
        assert math.isfinite(efx["team_extrinsic_return_mean"])
        assert math.isfinite(efx["mixture_intrinsic_return_mean"])
        assert efx["mixture_intrinsic_return_mean"] > 0  # -c log pi of sampled actions
        assert budgets[0] != budgets[1]  # the outer loop moved z
        critic = result["learners"][CRITIC_MODULE_ID]
        assert critic[BUDGET_MEAN] > 0 and math.isfinite(critic[Z0_MEAN])
        # the mechanism acted: rows short of their budget were pushed / capped
        assert critic[UNMET_ROW_FRACTION] > 0
        assert 0 <= critic[BINDING_FRACTION] <= 1
    finally:
        algorithm.stop()
