"""``budget_bonus_coeff``: the team intrinsic reward joins the team reward before GAE,
paid only up to the budget each step still had to collect, in both joint-critic
pipelines (``efx_mappo``, ``efx_vdppo``)."""

import numpy as np
import pytest

from marllib_ext import algos, make_env
from marllib_ext.algos.efx import EFXJointCriticLearner, EFXVDLearner
from marllib_ext.errors import ConfigError
from marllib_ext.postprocessing.block_batch import REWARD_BONUS_MEAN
from marllib_ext.postprocessing.efx_advantage import (
    BUDGET_BONUS_CUT_FRACTION,
    EFXJointAdvantageConnector,
    EFXVDJointAdvantageConnector,
)
from marllib_ext.postprocessing.intrinsic_signals import INTRINSIC_REWARD

BETA = 0.3
COEF = 0.5


class RecordingJoint(EFXJointAdvantageConnector):
    recorded: list = []

    def adjust_block_advantages(self, teams, metrics):
        RecordingJoint.recorded.append((self, teams))
        return super().adjust_block_advantages(teams, metrics)


class RecordingVD(EFXVDJointAdvantageConnector):
    def adjust_block_advantages(self, teams, metrics):
        RecordingJoint.recorded.append((self, teams))
        return super().adjust_block_advantages(teams, metrics)


class RecordingJointLearner(EFXJointCriticLearner):
    advantage_connector_class = RecordingJoint


class RecordingVDLearner(EFXVDLearner):
    advantage_connector_class = RecordingVD


@pytest.mark.parametrize(
    "algo, learner", [("efx_mappo", RecordingJointLearner), ("efx_vdppo", RecordingVDLearner)]
)
def test_the_bonus_is_the_intrinsic_reward_up_to_the_budget(ray_session, algo, learner):
    RecordingJoint.recorded.clear()
    config = getattr(algos, algo)(
        intrinsic_reward="count", intrinsic_coef=COEF, budget_bonus_coeff=BETA,
        num_env_runners=0, num_envs_per_env_runner=2, train_batch_size=400,
        minibatch_size=200, num_epochs=1,
    ).rllib_config(make_env("grid:pass", size=5, max_steps=30), seed=0)  # fmt: skip
    algorithm = config.learners(learner_class=learner).build_algo()
    try:
        result = algorithm.train()
    finally:
        algorithm.stop()
    assert RecordingJoint.recorded
    paid_total, cut_rows, zero_budget_rows = 0.0, 0, 0
    for connector, teams in RecordingJoint.recorded:
        for team in teams:
            block = team.block
            alive = block.alive
            extrinsic = np.where(alive, block.rewards, 0.0).sum(-1)
            delta = sum(
                np.where(alive[:, :, i], np.asarray(block.outputs[a][INTRINSIC_REWARD]), 0.0)
                for i, a in enumerate(block.agents)
            )
            z = connector.block_budget(block, team.team, after=False)
            expected = np.where(alive.any(-1), np.minimum(delta, np.maximum(z, 0.0)), 0.0)
            np.testing.assert_allclose(team.rewards, extrinsic + BETA * expected, rtol=1e-12)
            acted = alive.any(-1)
            paid_total += expected[acted].sum()
            cut_rows += int((expected[acted] < delta[acted]).sum())
            zero_budget_rows += int((acted & (z <= 0)).sum())
    # Some rows were paid, and the budget cut others (episodes at z = 0 or past theirs).
    assert paid_total > 0 and cut_rows > 0 and zero_budget_rows > 0
    critic = next(m for m in result["learners"].values() if BUDGET_BONUS_CUT_FRACTION in m)
    assert critic[REWARD_BONUS_MEAN] > 0 and 0 < critic[BUDGET_BONUS_CUT_FRACTION] < 1


def test_a_negative_bonus_coefficient_is_named():
    with pytest.raises(ConfigError, match="budget_bonus_coeff"):
        algos.efx_mappo(budget_bonus_coeff=-0.1).settings("grid:pass")
