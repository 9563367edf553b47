"""happo: policies really are updated one after another, each with the factor M of the
policies updated before it in that iteration; and the configurations it refuses."""

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from marllib_ext import algos
from marllib_ext.algos.happo import HAPPO_FACTOR, TEAM_ROW, HAPPOLearner
from marllib_ext.errors import ConfigError
from marllib_ext.rllib_compat import local_learner
from tests.helpers import counter_config

PARTS = []


class RecordingHAPPOLearner(HAPPOLearner):
    def sgd_step(self, phase, module_batches, context):
        PARTS.append(
            {
                mid: {
                    column: rows[column].detach().cpu().clone()
                    for column in (
                        Columns.OBS,
                        Columns.ACTIONS,
                        Columns.ACTION_LOGP,
                        Columns.LOSS_MASK,
                        TEAM_ROW,
                        HAPPO_FACTOR,
                    )
                    if column in rows
                }
                for mid, rows in module_batches.items()
            }
        )
        return super().sgd_step(phase, module_batches, context)


def logp_now(learner, module_id, columns):
    module = learner.module[module_id].unwrapped()
    with torch.no_grad():
        out = module.forward_train({Columns.OBS: columns[Columns.OBS]})
        dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        return dist.logp(columns[Columns.ACTIONS]).double().numpy()


def test_each_policy_is_updated_after_the_previous_ones_with_their_new_ratios(ray_session):
    PARTS.clear()
    config = counter_config("happo", "test:counter", RecordingHAPPOLearner, "individual")
    algorithm = config.build_algo()
    try:
        algorithm.train()
        learner = local_learner(algorithm)
        order = list(learner.last_order)
        critic_part, *actor_parts = PARTS
        assert all(m.startswith("joint_critic") for m in critic_part)  # the critic first
        assert [next(iter(part)) for part in actor_parts] == order
        assert sorted(order) == ["agent_0", "agent_1", "agent_2"]

        # After the iteration every policy holds its new weights; M of the m-th policy
        # is, per env step, the product of the new/old ratios of the policies before it.
        log_ratio_at_row = {}
        for position, module_id in enumerate(order):
            columns = actor_parts[position][module_id]
            rows = columns[TEAM_ROW].long().numpy()
            valid = columns[Columns.LOSS_MASK].numpy()
            expected = np.ones(len(rows))
            for previous in order[:position]:
                expected *= np.exp(log_ratio_at_row[previous][rows])
            np.testing.assert_allclose(
                columns[HAPPO_FACTOR].numpy()[valid], expected[valid], rtol=1e-5
            )
            if position == 1:
                assert np.abs(expected[valid] - 1).max() > 1e-3  # the first policy moved
            log_ratio = logp_now(learner, module_id, columns) - columns[Columns.ACTION_LOGP].numpy()
            log_ratio_at_row[module_id] = np.zeros(rows.max() + 1)
            log_ratio_at_row[module_id][rows[valid]] = log_ratio[valid]
    finally:
        algorithm.stop()


def test_the_order_is_drawn_afresh_each_iteration(ray_session):
    config = counter_config("happo", "test:counter", HAPPOLearner, "individual")
    algorithm = config.build_algo()
    try:
        orders = set()
        for _ in range(6):
            algorithm.train()
            orders.add(tuple(local_learner(algorithm).last_order))
    finally:
        algorithm.stop()
    assert len(orders) > 1


@pytest.mark.parametrize("name", ["happo", "efx_happo"])
def test_one_shared_policy_is_a_clear_error(name):
    with pytest.raises(ConfigError, match="share_policy='all' gives team"):
        algos.get(name).rllib_config("mpe:simple_spread", share_policy="all")


@pytest.mark.slow
def test_happo_learns_coordination_beyond_random(ray_session, tmp_path):
    from tests.algos.ppo.test_learning import RANDOM_AGENT_RETURN

    result = algos.happo().fit(
        "toy:coordination",
        stop={"training_iteration": 20},
        share_policy="individual",
        seed=0,
        local_dir=tmp_path,
        num_env_runners=0,
    )
    assert result.final["agent_return_mean"] > 4 * RANDOM_AGENT_RETURN, result.progress


def test_efx_happo_applies_the_conservative_advantage_sequentially(ray_session):
    from marllib_ext.algos.efx import RESULT_KEY, EFXHAPPOLearner
    from marllib_ext.postprocessing.efx_advantage import BINDING_FRACTION

    config = algos.efx_happo(hyperparam_source="toy", num_env_runners=0).rllib_config(
        "toy:coordination", share_policy="individual", seed=0
    )
    algorithm = config.build_algo()
    try:
        result = algorithm.train()
        learner = local_learner(algorithm)
        assert isinstance(learner, EFXHAPPOLearner) and len(learner.last_order) == 2
    finally:
        algorithm.stop()
    assert 0.0 <= result["learners"]["joint_critic"][BINDING_FRACTION] <= 1.0
    assert np.isfinite(result[RESULT_KEY]["budget_z"])
    assert "happo_factor_mean" in result["learners"][learner.last_order[1]]
