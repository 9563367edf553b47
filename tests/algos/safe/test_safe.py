"""Safe-MARL baselines end to end: metrics, learning under a cost limit, checkpoints and
clear errors."""

import pytest
from ray.rllib.algorithms.algorithm import Algorithm

from marllib_ext import algos
from marllib_ext.algos.api import with_episode_end_callback
from marllib_ext.algos.safe import RESULT_KEY, log_episode_cost
from marllib_ext.envs import register_env
from marllib_ext.errors import ConfigError
from marllib_ext.policies import CRITIC_MODULE_ID
from marllib_ext.rllib_compat import local_learner
from tests.helpers import CostTradeoffEnv

SAFE_ALGOS = tuple(algos.algorithms_that(needs_costs=True))
SMALL = {"num_env_runners": 0, "train_batch_size": 400, "minibatch_size": 200, "num_epochs": 2}

register_env("test:cost_tradeoff", CostTradeoffEnv, state_source="observations")


@pytest.mark.parametrize(
    "name",
    [
        n if n in ("mappo_lag", "mappo_cup") else pytest.param(n, marks=pytest.mark.slow)
        for n in SAFE_ALGOS
    ],
)
def test_trains_on_simple_spread_and_reports_cost_metrics(ray_session, name):
    config = algos.get(name, **SMALL).rllib_config("mpe:simple_spread", seed=0)
    algorithm = config.build_algo()
    try:
        results = [algorithm.train() for _ in range(2)]
    finally:
        algorithm.stop()
    safe = results[-1][RESULT_KEY]
    assert set(safe) == {
        "episode_cost_mean",
        "cost_multiplier",
        "cost_limit",
        "cost_limit_violation",
    }
    assert safe["cost_limit"] == 1.0  # the mpe source's limit
    assert safe["episode_cost_mean"] >= 0 and safe["cost_multiplier"] >= 0
    assert safe["cost_limit_violation"] == pytest.approx(max(0.0, safe["episode_cost_mean"] - 1.0))
    critic = results[-1]["learners"][CRITIC_MODULE_ID]
    assert {"cost_vf_loss", "cost_vf_explained_var", "cost_multiplier"} <= set(critic)
    actor = results[-1]["learners"]["shared"]
    if name == "mappo_focops":
        assert 0.0 <= actor["focops_inside_fraction"] <= 1.0
    if name == "mappo_cup":
        assert "cup_projection_kl" in actor


TRADEOFF = {**SMALL, "hyperparam_source": "toy", "train_batch_size": 200, "num_epochs": 4}
# Faster multiplier dynamics than SafePO's defaults so 15 small iterations suffice.
FAST_MULTIPLIER = {
    "mappo_lag": {"lagrangian_multiplier_lr": 0.5},
    "mappo_pid_lag": {"pid_kp": 0.2, "pid_ki": 0.05},
    "mappo_cup": {"lagrangian_multiplier_lr": 0.5},
    "mappo_focops": {"lagrangian_multiplier_lr": 0.5},
}


def tradeoff_cost(name, **overrides):
    config = algos.get(name, **TRADEOFF, **overrides).rllib_config("test:cost_tradeoff", seed=0)
    if name == "mappo":  # mappo logs no cost; reuse the safe callback for the metric
        config = with_episode_end_callback(config, log_episode_cost)
    algorithm = config.build_algo()
    try:
        for _ in range(15):
            result = algorithm.train()
    finally:
        algorithm.stop()
    runners = result["env_runners"]
    return runners["safe_episode_cost_sum"] / runners["safe_episodes_done"]


def test_reward_greedy_mappo_pays_the_cost(ray_session):
    """The costly action pays more reward: MAPPO takes it (team cost -> 20 per episode;
    a random team pays about 10)."""
    assert tradeoff_cost("mappo") > 15.0


@pytest.mark.parametrize(
    "name",
    [n if n == "mappo_lag" else pytest.param(n, marks=pytest.mark.slow) for n in SAFE_ALGOS],
)
def test_safe_algorithms_drive_the_cost_below_the_limit(ray_session, name):
    assert tradeoff_cost(name, cost_limit=2.0, **FAST_MULTIPLIER[name]) < 2.0


@pytest.mark.parametrize("name", ["mappo_lag", "mappo_pid_lag"])
def test_checkpoint_restore_keeps_the_multiplier(ray_session, tmp_path, name):
    config = algos.get(
        name, **SMALL, hyperparam_source="toy", cost_limit=0.0, lagrangian_multiplier_init=0.3
    ).rllib_config("test:cost_tradeoff", seed=0)
    algorithm = config.build_algo()
    try:
        for _ in range(2):
            multiplier = algorithm.train()[RESULT_KEY]["cost_multiplier"]
        algorithm.save_to_path(str(tmp_path / "checkpoint"))
    finally:
        algorithm.stop()
    assert multiplier != pytest.approx(0.3)
    restored = Algorithm.from_checkpoint(str(tmp_path / "checkpoint"))
    try:
        learner = local_learner(restored)
        assert learner.multiplier.multiplier == pytest.approx(multiplier)
        restored.train()
    finally:
        restored.stop()


def test_env_without_costs_is_a_clear_error(ray_session):
    config = algos.mappo_lag(**SMALL).rllib_config("toy:coordination", seed=0)
    algorithm = config.build_algo()
    try:
        with pytest.raises(Exception, match=r"info\['cost'\]"):
            algorithm.train()
    finally:
        algorithm.stop()


@pytest.mark.parametrize(
    "name,key,value",
    [
        ("mappo_focops", "focops_eta", 0.0),
        ("mappo_focops", "focops_lam", -1.0),
        ("mappo_cup", "cup_lambda", 1.5),
        ("mappo_lag", "lagrangian_multiplier_lr", 0.0),
        ("mappo_lag", "cost_limit", -1.0),
        ("mappo_pid_lag", "pid_d_delay", 0),
    ],
)
def test_bad_values_name_the_key(name, key, value):
    with pytest.raises(ConfigError, match=key):
        algos.get(name, **{key: value}).settings("mpe:simple_spread")


def test_pid_settings_reject_adam_only_keys():
    with pytest.raises(ConfigError, match="lagrangian_multiplier_lr"):
        algos.get("mappo_pid_lag", lagrangian_multiplier_lr=0.1).settings("mpe:simple_spread")
