"""Safe MARL on a mixed env: each team has its own cost, cost critic and multiplier."""

import numpy as np
import pytest

from marllib_ext import algos
from marllib_ext.algos.safe import RESULT_KEY
from marllib_ext.envs import make_env, register_env
from marllib_ext.envs.adapter import TEAM_COST_KEY
from marllib_ext.policies import critic_module_id
from marllib_ext.postprocessing.cost_advantage import TEAM_COST_MEAN
from tests.algos.safe.test_safe import FAST_MULTIPLIER, TRADEOFF
from tests.helpers import CostTradeoffEnv


class TwoTeamCostEnv(CostTradeoffEnv):
    """CostTradeoffEnv for a blue and a red team of two; red's costly action is free."""

    def __init__(self):
        super().__init__()
        self.possible_agents = ["blue_0", "blue_1", "red_0", "red_1"]

    def step(self, actions):
        obs, rewards, terms, truncs, infos = super().step(actions)
        for agent in ("red_0", "red_1"):
            infos[agent]["cost"] = 0.0
        return obs, rewards, terms, truncs, infos


register_env(
    "test:two_team_costs",
    TwoTeamCostEnv,
    team_prefix=["blue_", "red_"],
    state_source="observations",
)


def test_the_adapter_sums_each_agents_own_team_cost():
    env = make_env("test:two_team_costs").make_rllib_env()
    env.reset(seed=0)
    _, _, _, _, infos = env.step({a: 0 for a in env.possible_agents})
    assert {a: infos[a][TEAM_COST_KEY] for a in env.possible_agents} == {
        "blue_0": 2.0,
        "blue_1": 2.0,
        "red_0": 0.0,
        "red_1": 0.0,
    }


@pytest.mark.parametrize("name", ["mappo_lag", pytest.param("mappo_cup", marks=pytest.mark.slow)])
def test_each_team_multiplier_follows_its_own_cost(ray_session, name):
    config = algos.get(name, **TRADEOFF, cost_limit=2.0, **FAST_MULTIPLIER[name]).rllib_config(
        "test:two_team_costs", share_policy="group", seed=0
    )
    algorithm = config.build_algo()
    try:
        results = [algorithm.train() for _ in range(15)]
    finally:
        algorithm.stop()
    teams = results[-1][RESULT_KEY]["teams"]
    assert set(teams) == {"blue", "red"}
    assert np.isnan(results[-1][RESULT_KEY]["cost_multiplier"])  # no single multiplier
    # Red's costs are 0: its multiplier never leaves 0, and red stays reward-greedy.
    assert all(r[RESULT_KEY]["teams"]["red"]["cost_multiplier"] == 0.0 for r in results)
    assert max(r[RESULT_KEY]["teams"]["blue"]["cost_multiplier"] for r in results) > 0.1
    assert teams["red"]["episode_cost_mean"] == 0.0
    assert teams["blue"]["episode_cost_mean"] < 2.0  # blue was driven under its limit
    returns = results[-1]["env_runners"]["agent_episode_returns_mean"]
    assert returns["red_0"] + returns["red_1"] > returns["blue_0"] + returns["blue_1"] + 2.0
    # Each team's cost critic saw its own team's cost only.
    red, blue = critic_module_id("red"), critic_module_id("blue")
    assert all(r["learners"][red][TEAM_COST_MEAN] == 0.0 for r in results)
    assert results[0]["learners"][blue][TEAM_COST_MEAN] > 0.0
