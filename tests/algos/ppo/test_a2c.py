"""ia2c / maa2c / vda2c (and ipg, the baseline policy gradient): A2C's actor loss on the
IL, CC and VD pipelines."""

import pytest

from marllib_ext import algos
from marllib_ext.algos.ppo import a2c
from marllib_ext.errors import ConfigError
from tests.algos.ppo.test_learning import RANDOM_AGENT_RETURN

A2C_ALGOS = ("ia2c", "maa2c", "vda2c", "ipg")


SHARING = {"ia2c": "individual", "maa2c": "all", "vda2c": "all", "ipg": "individual"}


def spy_on_the_a2c_loss(monkeypatch) -> list:
    """Records the shape of every call of ``ops.a2c_policy_loss`` made by the learners."""
    calls = []
    original = a2c.a2c_policy_loss

    def spy(*args, **kwargs):
        calls.append(tuple(args[0].shape))
        return original(*args, **kwargs)

    monkeypatch.setattr(a2c, "a2c_policy_loss", spy)
    return calls


def fit(name, tmp_path, iterations):
    return algos.get(name).fit(
        "toy:coordination",
        stop={"training_iteration": iterations},
        share_policy=SHARING[name],
        seed=0,
        local_dir=tmp_path,
        num_env_runners=0,
    )


@pytest.mark.parametrize("name", A2C_ALGOS)
def test_one_a2c_step_per_actor_module_and_iteration(ray_session, tmp_path, monkeypatch, name):
    calls = spy_on_the_a2c_loss(monkeypatch)
    fit(name, tmp_path, iterations=2)
    # The whole batch in one step, with A2C's loss, not PPO's.
    n_actors = 2 if SHARING[name] == "individual" else 1
    assert len(calls) == 2 * n_actors
    assert all(shape[0] >= 400 for shape in calls)  # each module's 400 agent steps


@pytest.mark.slow
@pytest.mark.parametrize("name", A2C_ALGOS)
def test_learns_coordination_beyond_random(ray_session, tmp_path, name):
    result = fit(name, tmp_path, iterations=40)
    # One step per batch learns slower than PPO's epochs: 2.5x the random team here
    # (PPO's test asks 5x after 20 iterations).
    assert result.final["agent_return_mean"] > 2.5 * RANDOM_AGENT_RETURN, result.progress


@pytest.mark.parametrize("name", A2C_ALGOS)
@pytest.mark.parametrize(
    "key,value", [("num_epochs", 3), ("minibatch_size", 400)], ids=["epochs", "minibatch"]
)
def test_more_than_one_pass_is_an_error_naming_the_key(name, key, value):
    with pytest.raises(ConfigError, match=key):
        algos.get(name, **{key: value}).settings("mpe:simple_spread")


def test_marllib_defaults():
    settings = algos.maa2c().settings("mpe:simple_spread")
    assert (settings.lambda_, settings.lr, settings.entropy_coeff) == (1.0, 0.0005, 0.01)
    assert algos.vda2c(mixer="vdn").settings("mpe:simple_spread").mixer == "vdn"


def test_ipg_is_the_monte_carlo_policy_gradient_with_a_baseline_and_no_entropy_bonus():
    settings = algos.ipg().settings("mpe:simple_spread")
    assert (settings.lambda_, settings.entropy_coeff, settings.num_epochs) == (1.0, 0.0, 1)
    assert settings.minibatch_size is None
