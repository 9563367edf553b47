"""efx_mappo on a mixed env: one budget per team, each with its own range, decaying by
its own agents' log-probs, seen only by its own agents, with its own outer loop."""

import numpy as np
import pytest

from marllib_ext import algos
from marllib_ext.algos.efx import RESULT_KEY, EFXJointCriticLearner
from marllib_ext.envs import register_env
from marllib_ext.errors import ConfigError
from marllib_ext.policies import critic_module_id
from marllib_ext.postprocessing.budget_connector import budget_controllers
from marllib_ext.postprocessing.efx_advantage import EFXJointAdvantageConnector
from marllib_ext.rllib_compat import settings_of
from tests.algos.efx.test_efx import rows_by_step
from tests.helpers import EPISODE_LENGTH, TwoTeamCounterEnv, counter_config

register_env(
    "test:efx_two_teams",
    TwoTeamCounterEnv,
    team_prefix=["blue_", "red_"],
    all_agents_one_policy=True,
    state_source="observations",
    max_episode_steps=EPISODE_LENGTH,
)
RECORDED = []
COEF, Z_INIT = 0.7, 3.0


class RecordingTeamConnector(EFXJointAdvantageConnector):
    def adjust_block_advantages(self, teams, metrics):
        RECORDED.append({"budget": self.team, "critic": self.critic_module_id, "teams": teams})
        return super().adjust_block_advantages(teams, metrics)


class RecordingTeamLearner(EFXJointCriticLearner):
    advantage_connector_class = RecordingTeamConnector


def resolved_settings(**overrides):
    return settings_of(
        algos.efx_mappo(**overrides).rllib_config("test:efx_two_teams", share_policy="group")
    )


def test_each_team_has_its_own_budget_range():
    settings = resolved_settings(intrinsic_coef=COEF)
    ranges = {b.team: (b.agents, b.z_low, b.z_high) for b in settings.team_budgets}
    z_max_per_agent = COEF * EPISODE_LENGTH * np.log(2)  # Discrete(2) actions
    assert ranges["blue"] == (("blue_0",), 0.0, pytest.approx(z_max_per_agent))
    assert ranges["red"] == (("red_0", "red_1"), 0.0, pytest.approx(2 * z_max_per_agent))
    assert settings.z_low is None  # no single range on a mixed env


def test_team_budgets_cannot_be_set_by_hand():
    with pytest.raises(ConfigError, match="'team_budgets'.*derived from the env"):
        algos.efx_mappo(team_budgets=()).settings("test:efx_two_teams")


@pytest.mark.parametrize(
    "share_policy", ["group", pytest.param("individual", marks=pytest.mark.slow)]
)
def test_each_team_budget_decays_by_its_own_agents_logp(ray_session, share_policy):
    RECORDED.clear()
    config = counter_config(
        "efx_mappo",
        "test:efx_two_teams",
        RecordingTeamLearner,
        share_policy,
        intrinsic_coef=COEF,
        z_init=Z_INIT,
        z_sampling="fixed",
        lr_z=0.0,
    )
    algorithm = config.build_algo()
    try:
        results = [algorithm.train() for _ in range(3)]
    finally:
        algorithm.stop()

    checked = {"blue": 0, "red": 0}
    for record in RECORDED:
        budget = record["budget"]
        assert record["critic"] == critic_module_id(budget.team)
        steps = rows_by_step(record, budget.input)  # (uid, t) -> (z seen, team logp sum)
        for (uid, t), (z, logp_sum) in steps.items():
            if t == 0:
                assert z == pytest.approx(Z_INIT)
            if (uid, t + 1) in steps:
                expected = min(max(z + COEF * logp_sum, budget.z_low), budget.z_high)
                assert steps[(uid, t + 1)][0] == pytest.approx(expected, abs=1e-5)
                checked[budget.team] += 1
    assert checked["blue"] > 10 and checked["red"] > 10

    efx = results[-1][RESULT_KEY]
    teams = efx["teams"]
    assert set(teams) == {"blue", "red"}
    assert teams["blue"]["budget_z"] == pytest.approx(Z_INIT)  # lr_z = 0
    assert np.isnan(efx["budget_z"])  # no single budget on a mixed env
    # Each team's outer loop reads its own returns; together they are every agent's.
    assert teams["blue"]["team_extrinsic_return_mean"] + teams["red"][
        "team_extrinsic_return_mean"
    ] == pytest.approx(efx["team_extrinsic_return_mean"])
    assert teams["red"]["team_intrinsic_return_mean"] > teams["blue"]["team_intrinsic_return_mean"]


def test_each_team_outer_loop_steps_on_its_own_returns(ray_session):
    config = counter_config(
        "efx_mappo",
        "test:efx_two_teams",
        RecordingTeamLearner,
        "group",
        lr_z=0.2,
        z_deploy_fraction=1.0,
    )
    algorithm = config.build_algo()
    try:
        results = [algorithm.train()[RESULT_KEY]["teams"] for _ in range(4)]
    finally:
        algorithm.stop()
    settings = settings_of(config)
    replayed = budget_controllers(settings)
    for team, controller in replayed.items():
        for teams in results:
            played = teams[team]
            assert played["budget_z_played"] == pytest.approx(controller.z)
            controller.update(
                played["team_extrinsic_return_mean"], played["team_intrinsic_return_mean"]
            )
            assert played["budget_z"] == pytest.approx(controller.z)
        assert controller.z_low <= controller.z <= controller.z_high
        assert sum(np.isfinite(teams[team]["slack"]) for teams in results) >= 2  # real steps


def test_evaluate_plays_each_team_budget_and_refuses_one_z(ray_session, tmp_path):
    from marllib_ext.algos.efx.deployment import sweep_budgets
    from marllib_ext.algos.evaluation import evaluate

    result = algos.efx_mappo(hyperparam_source="toy", num_env_runners=0).fit(
        "test:efx_two_teams",
        stop={"training_iteration": 1},
        share_policy="group",
        local_dir=tmp_path,
    )
    played = evaluate(result.checkpoint_path, episodes=2)
    assert len(played.team_returns) == 2 and played.budget_z is None
    with pytest.raises(ConfigError, match="one budget per team"):
        evaluate(result.checkpoint_path, episodes=2, z=1.0)
    with pytest.raises(ConfigError, match="one budget per team"):
        sweep_budgets(result.checkpoint_path, points=2, episodes=1)


def test_efx_vdppo_mixes_each_team_with_its_own_budget(ray_session):
    from marllib_ext.postprocessing.efx_advantage import BINDING_FRACTION, BUDGET_MEAN

    config = algos.efx_vdppo(
        hyperparam_source="toy", num_env_runners=0, train_batch_size=96, minibatch_size=96
    ).rllib_config("test:efx_two_teams", share_policy="group", seed=0)
    algorithm = config.build_algo()
    try:
        results = [algorithm.train() for _ in range(2)]
    finally:
        algorithm.stop()
    settings = settings_of(config)
    for budget in settings.team_budgets:
        critic = results[-1]["learners"][critic_module_id(budget.team)]
        assert 0.0 <= critic[BINDING_FRACTION] <= 1.0
        assert budget.z_low <= critic[BUDGET_MEAN] <= budget.z_high
    assert set(results[-1][RESULT_KEY]["teams"]) == {"blue", "red"}
