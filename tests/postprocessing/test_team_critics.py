"""Mixed envs: one joint critic per team. The advantage written to a team's rows is team
GAE on that team's summed reward with that team's critic, checked against a reference
computed from the observations alone (episode id, step, agent)."""

import numpy as np
import pytest
from ray.rllib.core.columns import Columns

from marllib_ext import algos
from marllib_ext.algos.ppo.learners import JointCriticPPOLearner
from marllib_ext.envs import make_env
from marllib_ext.errors import ConfigError
from marllib_ext.policies import critic_module_id
from marllib_ext.postprocessing import JointAdvantageConnector
from tests.helpers import counter_config, reward_of
from tests.team_advantages import GAMMA, LAMBDA, recording, reference_team_advantages

BLUE, RED = (0,), (1, 2)
RECORDED = []


class RecordingLearner(JointCriticPPOLearner):
    advantage_connector_class = recording(
        JointAdvantageConnector,
        RECORDED,
        columns=(Columns.OBS, Columns.LOSS_MASK, Columns.ADVANTAGES),
    )


def team_reward(agents):
    return lambda uid, t, i: reward_of(uid, t, i) if i in agents else 0.0


@pytest.mark.parametrize("share_policy", ["group", "individual"])
def test_each_team_gets_gae_on_its_own_reward_and_critic(ray_session, share_policy):
    RECORDED.clear()
    config = counter_config(
        "mappo", "test:two_teams", RecordingLearner, share_policy, gamma=GAMMA, lambda_=LAMBDA
    )
    assert {critic_module_id("blue"), critic_module_id("red")} <= set(config.policies)
    algorithm = config.build_algo()
    try:
        for _ in range(2):
            algorithm.train()
    finally:
        algorithm.stop()
    checked = {"blue": 0, "red": 0}
    for record in RECORDED:
        team = record["critic_module_id"].rsplit("_", 1)[-1]
        agents = BLUE if team == "blue" else RED
        reference = reference_team_advantages(record, team_reward(agents))
        for columns in record["modules"].values():
            for (uid, t, i), valid, advantage in zip(
                columns[Columns.OBS],
                columns[Columns.LOSS_MASK],
                columns[Columns.ADVANTAGES],
                strict=True,
            ):
                assert int(i) in agents  # only this team's rows were written
                if valid:
                    assert advantage == pytest.approx(reference[(int(uid), int(t))], abs=2e-4)
                    checked[team] += 1
    assert checked["blue"] > 0 and checked["red"] > 0


def test_a_policy_shared_across_teams_is_an_error():
    with pytest.raises(ConfigError, match="one team per policy"):
        algos.mappo().rllib_config("test:two_teams", share_policy="all")


def test_a_single_team_algorithm_refuses_mixed_envs_before_anything_starts():
    import dataclasses

    from marllib_ext.algos.registry import Capabilities, get_algo_spec

    one_team = dataclasses.replace(
        get_algo_spec("mappo"), capabilities=Capabilities(multi_team=False)
    )
    with pytest.raises(ConfigError, match="supports one team"):
        one_team.check_env(make_env("mpe:simple_tag"))


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in algos.algorithms_that(multi_team=True, off_policy=False)
        if algos.ALGORITHMS[n].pipeline in ("CC", "VD")
    ],
)
def test_joint_critic_algorithms_build_one_critic_per_team_on_simple_tag(name):
    share = "individual" if algos.ALGORITHMS[name].capabilities.sequential else "group"
    config = algos.get(name).rllib_config("mpe:simple_tag", share_policy=share)
    critics = sorted(p for p in config.policies if p.startswith("joint_critic"))
    assert critics == [critic_module_id("adversary"), critic_module_id("agent")]


def test_cooperative_envs_keep_one_critic():
    config = algos.mappo().rllib_config("mpe:simple_speaker_listener", share_policy="group")
    assert [p for p in config.policies if p.startswith("joint_critic")] == ["joint_critic"]
    np.testing.assert_equal(len(config.policies), 3)
