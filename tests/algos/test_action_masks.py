"""Every pipeline on an env with illegal moves: ``toy:legal_moves`` raises on any
illegal action, so a finished iteration means no actor sampled one."""

import math

import pytest

from marllib_ext import algos, make_env
from marllib_ext.errors import ConfigError, EnvError

ENV = "toy:legal_moves"
ON_POLICY = {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1}
A2C = {"train_batch_size": 200, "minibatch_size": None, "num_epochs": 1}
JOINT_Q = {"learning_starts": 2, "batch_episode": 4}
CASES = {
    "mappo": ({}, ON_POLICY),
    "qmix": ({}, JOINT_Q),
    "ippo": ({}, ON_POLICY),
    "vdppo": ({}, ON_POLICY),
    "efx_mappo": ({}, ON_POLICY),
    "efx_vdppo": ({}, ON_POLICY),
    "happo": ({"share_policy": "individual"}, ON_POLICY),
    "efx_happo": ({"share_policy": "individual"}, ON_POLICY),
    "maa2c": ({}, A2C),
    "coma": ({}, A2C),
    "iql": ({}, JOINT_Q),
    "vdn": ({}, JOINT_Q),
    "masac": ({}, JOINT_Q),
    "hasac": ({"share_policy": "individual"}, JOINT_Q),
}
DEFAULT_TIER = ("mappo", "qmix")


@pytest.mark.parametrize(
    "name",
    [n if n in DEFAULT_TIER else pytest.param(n, marks=pytest.mark.slow) for n in CASES],
)
def test_trains_on_legal_moves_only(ray_session, tmp_path, name):
    fit_args, overrides = CASES[name]
    result = algos.get(name, hyperparam_source="toy", num_env_runners=0, **overrides).fit(
        ENV, stop={"training_iteration": 2}, local_dir=tmp_path, **fit_args
    )
    row = result.final
    assert row["training_iteration"] == 2
    assert math.isfinite(row["agent_return_mean"])
    if "updates" in row:  # joint Q: the masked targets were trained on
        assert sum(r["updates"] for r in result.progress) > 0


def test_an_all_zero_mask_stops_training_naming_the_agent_and_step(ray_session, tmp_path):
    algo = algos.mappo(hyperparam_source="toy", num_env_runners=0, **ON_POLICY)
    with pytest.raises(EnvError) as raised:
        algo.fit(
            make_env(ENV, empty_mask_at=3),
            stop={"training_iteration": 3},
            local_dir=tmp_path,
        )
    message = str(raised.value)
    assert f"env {ENV!r}: agent 'agent_0' has no legal action" in message
    assert "at env step 3" in message


def test_the_budget_bound_counts_every_action_of_a_masked_env():
    """Z_max uses log|A_i| (the unmasked bound): it bounds the masked policy's entropy
    too (log|legal| <= log|A|), and needs no knowledge of which actions will be legal."""
    algo = algos.get("efx_mappo", hyperparam_source="toy")
    settings = algo.spec.resolve(algo.settings(ENV), make_env(ENV))
    (budget,) = settings.team_budgets
    episode_steps, n_agents, n_actions = 10, 2, 5
    z_max = settings.intrinsic_coef * episode_steps * n_agents * math.log(n_actions)
    assert budget.z_high == pytest.approx(z_max)


def test_continuous_action_algorithms_refuse_masked_envs():
    with pytest.raises(ConfigError, match="continuous"):
        algos.get("maddpg").rllib_config(ENV)
