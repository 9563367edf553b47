"""Cost GAE of the safe-MARL connector on real RLlib batches: every agent's row for env
step t gets the team cost advantage of step t (GAE as in ``team_gae``, on the critic's
cost head), also across chunk cuts, and the actors' advantage is the Lagrangian mix."""

import numpy as np
import pytest
from ray.rllib.core.columns import Columns

from marllib_ext.algos.safe import RESULT_KEY as SAFE_RESULT_KEY
from marllib_ext.algos.safe import SafeJointCriticLearner
from marllib_ext.envs import register_env
from marllib_ext.policies import CRITIC_MODULE_ID
from marllib_ext.postprocessing.cost_advantage import (
    COST_ADVANTAGES,
    COST_VALUE_TARGETS,
    CostJointAdvantageConnector,
)
from tests.helpers import CostCounterEnv, cost_of, counter_config
from tests.team_advantages import GAMMA, LAMBDA, recording, reference_team_advantages

RECORDED = []
COST_COLUMNS = (Columns.OBS, Columns.LOSS_MASK, Columns.ADVANTAGES, COST_ADVANTAGES)


def multiplier_and_critic_batch(connector):
    multiplier = connector.cost_multiplier  # the one the advantages were mixed with
    return lambda batch: {
        "multiplier": multiplier,
        "critic_batch": {k: v.detach().cpu().numpy() for k, v in batch[CRITIC_MODULE_ID].items()},
    }


class RecordingSafeLearner(SafeJointCriticLearner):
    advantage_connector_class = recording(
        CostJointAdvantageConnector,
        RECORDED,
        columns=COST_COLUMNS,
        critics={"critic": "compute_values", "cost_critic": "compute_cost_values"},
        extra=multiplier_and_critic_batch,
    )


register_env("test:cost_counter", CostCounterEnv, state_source="observations")


def test_cost_advantages_are_team_gae_on_costs_and_actors_get_the_lagrangian_mix(ray_session):
    RECORDED.clear()
    config = counter_config(
        "mappo_lag",
        "test:cost_counter",
        RecordingSafeLearner,
        gamma=GAMMA,
        lambda_=LAMBDA,
        lagrangian_multiplier_init=0.5,
        cost_limit=1.0,
    )
    algorithm = config.build_algo()
    try:
        results = [algorithm.train() for _ in range(3)]
    finally:
        algorithm.stop()

    assert RECORDED[0]["multiplier"] == pytest.approx(0.5)
    for record in RECORDED:
        cost_reference = reference_team_advantages(record, cost_of, "cost_critic")
        reward_reference = reference_team_advantages(record)
        lam = record["multiplier"]
        for columns in record["modules"].values():
            for (uid, t, _), valid, advantage, cost_advantage in zip(
                columns[Columns.OBS],
                columns[Columns.LOSS_MASK],
                columns[Columns.ADVANTAGES],
                columns[COST_ADVANTAGES],
                strict=True,
            ):
                if not valid:
                    assert advantage == 0.0 and cost_advantage == 0.0
                    continue
                key = (int(uid), int(t))
                assert cost_advantage == pytest.approx(cost_reference[key], abs=2e-4), key
                mixed = (reward_reference[key] - lam * cost_reference[key]) / (1 + lam)
                assert advantage == pytest.approx(mixed, abs=3e-4), key
        critic_batch = record["critic_batch"]
        valid = critic_batch[Columns.LOSS_MASK].astype(bool)
        assert np.isfinite(critic_batch[COST_VALUE_TARGETS][valid]).all()

    # Episode cost across chunk cuts (5-step fragments, 7-step episodes): exact.
    for result in results:
        assert result[SAFE_RESULT_KEY]["episode_cost_mean"] == pytest.approx(8.61)
    # Cost 8.61 above the limit 1.0: lambda rises by Adam steps of about lr=0.035.
    multipliers = [result[SAFE_RESULT_KEY]["cost_multiplier"] for result in results]
    assert multipliers[0] == pytest.approx(0.535, abs=1e-5)
    assert multipliers[0] < multipliers[1] < multipliers[2]
    assert RECORDED[-1]["multiplier"] == pytest.approx(multipliers[1], abs=1e-6)
