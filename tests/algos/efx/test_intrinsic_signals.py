"""EFX's intrinsic reward signals: the count signal's rewards, its merge across env
runners, and ``efx_mappo --set intrinsic_reward=count`` on both sampling paths (its
budget moved by the recorded bonuses, the learner reading the same values, counts
merged, checkpointed and restored, evaluation at a chosen z)."""

import numpy as np
import pytest
from ray.rllib.algorithms.algorithm import Algorithm

from marllib_ext import algos, make_env
from marllib_ext.algos.efx import RESULT_KEY, EFXJointCriticLearner, budget_connector
from marllib_ext.algos.efx.budget_range import with_resolved_budget
from marllib_ext.algos.ppo import JointCriticPPOLearner, VDPPOLearner
from marllib_ext.errors import ConfigError
from marllib_ext.ops.efx import budget_path
from marllib_ext.postprocessing.block_batch import REWARD_BONUS_MEAN, REWARD_BONUS_SHARE
from marllib_ext.postprocessing.budget_connector import STATE_KEY
from marllib_ext.postprocessing.efx_advantage import EFXJointAdvantageConnector
from marllib_ext.postprocessing.intrinsic_signals import INTRINSIC_REWARD, NoveltyRecorder
from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector
from marllib_ext.postprocessing.novelty_signals import CountSignal
from marllib_ext.postprocessing.vd_advantage import VDJointAdvantageConnector
from marllib_ext.rllib_compat import connectors_of, env_to_module
from marllib_ext.rollout.episode_blocks import after_step_column

COEF = 0.5


def count_signal(scope="agent", key_agents=("a", "b")):
    return CountSignal(
        coef=COEF, agents=list(key_agents), observation_dims=dict.fromkeys(key_agents, 2),
        teams=[[0, 1]], scope=scope, hash_kind="exact", hash_bits=32, decimals=2, seed=0,
    )  # fmt: skip


def test_agent_scope_counts_each_agents_own_observations():
    signal = count_signal()
    acted = np.ones((3, 2), bool)
    acted[2, 1] = False
    observations = {"a": np.zeros((3, 2)), "b": np.array([[1.0, 0], [1.0, 0], [2.0, 0]])}
    got = signal.rewards(logp=np.zeros((3, 2)), next_observations=observations, acted=acted)
    # a: the same cell three times; b: one cell twice (its third step did not happen)
    np.testing.assert_allclose(got, COEF / np.sqrt([[1, 1], [2, 2], [3, np.inf]]), atol=1e-12)
    first_rows = {agent: rows[:1] for agent, rows in observations.items()}
    again = signal.rewards(logp=np.zeros((1, 2)), next_observations=first_rows, acted=acted[:1])
    np.testing.assert_allclose(again, COEF / np.sqrt([[4, 3]]))


def test_team_scope_counts_the_joint_observation_and_splits_it():
    signal = count_signal(scope="team")
    observations = {"a": np.zeros((2, 2)), "b": np.zeros((2, 2))}
    acted = np.array([[True, True], [True, False]])
    got = signal.rewards(logp=np.zeros((2, 2)), next_observations=observations, acted=acted)
    # Row 0: joint (0, 0 | 0, 0), first visit, split between both agents; row 1: joint
    # (0, 0 | absent = zeros), the same code, second visit, all to a.
    np.testing.assert_allclose(got, [[COEF / 2, COEF / 2], [COEF / np.sqrt(2), 0.0]])


def test_merged_runner_states_keep_every_visit_including_late_ones():
    first, second, local = count_signal(), count_signal(), count_signal()
    cell = {"a": np.zeros((1, 2)), "b": np.ones((1, 2))}
    acted = np.ones((1, 2), bool)
    for _ in range(3):
        first.rewards(logp=np.zeros((1, 2)), next_observations=cell, acted=acted)
    second.rewards(logp=np.zeros((1, 2)), next_observations=cell, acted=acted)
    merged = CountSignal.merge_states([first.get_state(), second.get_state()])
    # A visit on the first runner after its state was taken, before the broadcast:
    first.rewards(logp=np.zeros((1, 2)), next_observations=cell, acted=acted)
    for signal in (first, second, local):
        signal.set_state(merged)
    # first: 4 own + 1 from second; second: 1 own + 3 from first (its 4th not yet synced)
    got = first.rewards(logp=np.zeros((1, 2)), next_observations=cell, acted=acted)
    np.testing.assert_allclose(got, COEF / np.sqrt([[6, 6]]))
    got = second.rewards(logp=np.zeros((1, 2)), next_observations=cell, acted=acted)
    np.testing.assert_allclose(got, COEF / np.sqrt([[5, 5]]))
    assert visits(local.get_state()) == 2 * 4


def visits(state) -> int:
    return sum(sum(table.values()) for table in state["tables"].values())


class RecordingConnector(EFXJointAdvantageConnector):
    recorded: list = []

    def adjust_block_advantages(self, teams, metrics):
        RecordingConnector.recorded.append(teams)
        return super().adjust_block_advantages(teams, metrics)


class RecordingLearner(EFXJointCriticLearner):
    advantage_connector_class = RecordingConnector


def count_config(sampler, num_env_runners=0, **overrides):
    settings = {
        "intrinsic_reward": "count",
        "intrinsic_coef": COEF,
        "num_env_runners": num_env_runners,
        "num_envs_per_env_runner": 2,
        "train_batch_size": 400,
        "minibatch_size": 200,
        "num_epochs": 1,
        **overrides,
    }
    config = algos.efx_mappo(**settings).rllib_config(
        make_env("grid:pass", size=5, max_steps=30), seed=0, sampler=sampler
    )
    return config.learners(learner_class=RecordingLearner)


def z_high(**overrides):
    env = make_env("grid:pass", size=5, max_steps=30)
    settings = algos.efx_mappo(intrinsic_reward="count", intrinsic_coef=COEF, **overrides)
    return with_resolved_budget(settings.settings(env), env).z_high


def test_z_max_of_the_count_signal():
    assert z_high() == pytest.approx(COEF * 30 * 2)  # c * T_max * n_agents
    assert z_high(count_scope="team") == pytest.approx(COEF * 30)  # one bonus per step


@pytest.mark.parametrize("sampler", ["auto", "per_world"])
def test_count_bonuses_move_the_budget_and_reach_the_learner(ray_session, sampler):
    RecordingConnector.recorded.clear()
    algorithm = count_config(sampler).build_algo()
    try:
        runner = algorithm.env_runner
        kind = "rollout blocks" if sampler == "auto" else "RLlib's per-world episodes"
        assert kind in runner.sampling
        result = algorithm.train()
        connector = budget_connector(runner)
        sampled = result["num_env_steps_sampled_lifetime"]
        # Every agent step of the iteration is one visit (agent scope).
        assert visits(connector.get_state()["signal"]) == 2 * sampled
    finally:
        algorithm.stop()
    assert np.isfinite(result[RESULT_KEY]["budget_z"])
    (budget,) = connector.settings.team_budgets
    for teams in RecordingConnector.recorded:
        for team in teams:
            block = team.block
            delta = np.zeros(block.alive.shape[:2])
            for i, agent in enumerate(block.agents):
                bonus = np.asarray(block.outputs[agent][INTRINSIC_REWARD], float)
                counts = (COEF / bonus[block.alive[:, :, i]]) ** 2
                np.testing.assert_allclose(counts, np.round(counts), rtol=1e-9)  # c / sqrt(n)
                assert counts.min() == pytest.approx(1.0) and counts.max() > 1.0
                delta += np.where(block.alive[:, :, i], bonus, 0.0)
            # z after a step that did not end the episode: z - delta, clipped.
            z = budget.input.read(block.observations[block.agents[0]])
            ended = block.terminated | block.truncated
            same_episode = ~ended[:-1]
            expected = np.clip(z[:-1] - delta[:-1], budget.z_low, budget.z_high)
            np.testing.assert_allclose(
                z[1:][same_episode], expected[same_episode], rtol=1e-5, atol=1e-4
            )


def test_per_world_episodes_record_the_bonus_the_budget_counted(ray_session):
    algorithm = count_config("per_world").build_algo()
    try:
        episodes = algorithm.env_runner.sample(num_episodes=3)
        connector = budget_connector(algorithm.env_runner)
    finally:
        algorithm.stop()
    (budget,) = connector.settings.team_budgets
    for episode in episodes:
        columns = {
            agent: after_step_column(episode, INTRINSIC_REWARD, agent, len(sa))
            for agent, sa in episode.agent_episodes.items()
        }
        state = episode.custom_data[STATE_KEY]
        np.testing.assert_allclose(
            state.intrinsic[0], [columns[a].sum() for a in sorted(columns)], rtol=1e-9
        )
        delta = columns["agent_0"] + columns["agent_1"]
        seen = budget.input.read(np.asarray(episode.agent_episodes["agent_0"].get_observations()))
        expected = budget_path(delta, z0=state.z0[0, 0], z_low=budget.z_low, z_high=budget.z_high)
        np.testing.assert_allclose(seen[:-1], expected, rtol=1e-5, atol=1e-4)


def test_counts_merge_across_runners_and_survive_a_checkpoint(ray_session, tmp_path):
    from marllib_ext.algos.evaluation import evaluate

    algorithm = count_config("auto", num_env_runners=2).build_algo()
    try:
        results = [algorithm.train() for _ in range(2)]
        state = budget_connector(algorithm.env_runner).get_state()["signal"]
        # Two remote runners' tables, every agent step sampled by either counted once.
        assert len([t for t in state["tables"].values() if t]) == 2
        assert visits(state) == 2 * results[-1]["num_env_steps_sampled_lifetime"]
        algorithm.save_to_path(str(tmp_path / "checkpoint"))
    finally:
        algorithm.stop()
    restored = Algorithm.from_checkpoint(str(tmp_path / "checkpoint"))
    try:
        assert visits(budget_connector(restored.env_runner).get_state()["signal"]) == visits(state)
        restored.train()
    finally:
        restored.stop()
    evaluation = evaluate(str(tmp_path / "checkpoint"), episodes=2, z=5.0)
    assert evaluation.budget_z == pytest.approx(5.0)


def test_a_wrong_signal_is_named():
    with pytest.raises(ConfigError, match="intrinsic_reward"):
        algos.efx_mappo(intrinsic_reward="novelty").settings("grid:pass")
    with pytest.raises(ConfigError, match="count_scope"):
        algos.efx_mappo(intrinsic_reward="count", count_scope="world").settings("grid:pass")
    with pytest.raises(ConfigError, match="intrinsic_bonus_coeff"):
        algos.mappo(intrinsic_bonus_coeff=-1.0).settings("grid:pass")
    with pytest.raises(ConfigError, match="intrinsic_bonus"):
        algos.mappo(intrinsic_bonus="surprisal").settings("grid:pass")
    with pytest.raises(ConfigError, match="intrinsic_bonus_coeff"):
        algos.vdppo(intrinsic_bonus_coeff=-1.0).settings("grid:pass")


class RecordingJointConnector(JointAdvantageConnector):
    recorded: list = []

    def adjust_block_advantages(self, teams, metrics):
        RecordingJointConnector.recorded.append(teams)
        return super().adjust_block_advantages(teams, metrics)


class RecordingJointLearner(JointCriticPPOLearner):
    advantage_connector_class = RecordingJointConnector


class RecordingVDConnector(VDJointAdvantageConnector):
    def adjust_block_advantages(self, teams, metrics):
        RecordingJointConnector.recorded.append(teams)
        return super().adjust_block_advantages(teams, metrics)


class RecordingVDLearner(VDPPOLearner):
    advantage_connector_class = RecordingVDConnector


@pytest.mark.parametrize(
    "algo, sampler",
    [("mappo", "auto"), ("mappo", "per_world"), ("vdppo", "auto")],
)
def test_the_novelty_bonus_joins_the_team_reward(ray_session, algo, sampler):
    beta = 0.3
    RecordingJointConnector.recorded.clear()
    env = make_env("grid:pass", size=5, max_steps=30)
    config = getattr(algos, algo)(
        intrinsic_bonus_coeff=beta, num_env_runners=0, num_envs_per_env_runner=2,
        train_batch_size=400, minibatch_size=200, num_epochs=1,
    ).rllib_config(env, seed=0, sampler=sampler)  # fmt: skip
    learner = RecordingJointLearner if algo == "mappo" else RecordingVDLearner
    algorithm = config.learners(learner_class=learner).build_algo()
    try:
        result = algorithm.train()
    finally:
        algorithm.stop()
    assert result["num_env_steps_sampled_lifetime"] >= 400
    assert RecordingJointConnector.recorded
    # The size of the bonus is logged: its mean over the team's rows, and its share of the
    # team reward's magnitude (all of it on this task until the goal is first reached).
    teams = RecordingJointConnector.recorded[-1]
    paid = np.concatenate([t.reward_bonus[t.acting] for t in teams])
    total = np.abs(np.concatenate([t.rewards[t.acting] for t in teams])).sum()
    (logged,) = [m for m in result["learners"].values() if REWARD_BONUS_MEAN in m]
    assert logged[REWARD_BONUS_MEAN] == pytest.approx(paid.mean())
    assert logged[REWARD_BONUS_SHARE] == pytest.approx(paid.sum() / total)
    assert 0.0 < logged[REWARD_BONUS_SHARE] <= 1.0
    for teams in RecordingJointConnector.recorded:
        for team in teams:
            block = team.block
            extrinsic = np.where(block.alive, block.rewards, 0.0).sum(-1)
            bonus = sum(
                np.where(block.alive[:, :, i], block.outputs[a][INTRINSIC_REWARD], 0.0)
                for i, a in enumerate(block.agents)
            )
            np.testing.assert_allclose(team.rewards, extrinsic + beta * bonus, rtol=1e-12)
            values = np.asarray(block.outputs[block.agents[0]][INTRINSIC_REWARD])[
                block.alive[:, :, 0]
            ]
            counts = 1.0 / values**2  # recorded with coefficient 1: 1 / sqrt(n)
            np.testing.assert_allclose(counts, np.round(counts), rtol=1e-9)


def test_mappo_without_a_bonus_records_nothing(ray_session):
    RecordingJointConnector.recorded.clear()
    config = algos.mappo(
        num_env_runners=0, num_envs_per_env_runner=2, train_batch_size=200,
        minibatch_size=200, num_epochs=1,
    ).rllib_config(make_env("grid:pass", size=5, max_steps=30), seed=0)  # fmt: skip
    algorithm = config.learners(learner_class=RecordingJointLearner).build_algo()
    try:
        algorithm.train()
    finally:
        algorithm.stop()
    (teams,) = RecordingJointConnector.recorded
    assert all(INTRINSIC_REWARD not in outputs for outputs in teams[0].block.outputs.values())


def test_the_bonus_counts_merge_across_runners(ray_session):
    env = make_env("grid:pass", size=5, max_steps=30)
    config = algos.mappo(
        intrinsic_bonus_coeff=0.1, num_env_runners=2, num_envs_per_env_runner=2,
        train_batch_size=400, minibatch_size=200, num_epochs=1,
    ).rllib_config(env, seed=0)  # fmt: skip
    algorithm = config.build_algo()
    try:
        results = [algorithm.train() for _ in range(2)]
        (recorder,) = connectors_of(env_to_module(algorithm.env_runner), NoveltyRecorder)
        state = recorder.get_state()["signal"]
    finally:
        algorithm.stop()
    assert len([t for t in state["tables"].values() if t]) == 2
    assert visits(state) == 2 * results[-1]["num_env_steps_sampled_lifetime"]


def test_the_extrinsic_tolerance_reaches_the_outer_loop():
    from marllib_ext.postprocessing.budget_connector import budget_controllers

    env = make_env("grid:pass", size=5, max_steps=30)
    settings = algos.efx_mappo(z_ext_tolerance=0.02).settings(env)
    (controller,) = budget_controllers(with_resolved_budget(settings, env)).values()
    assert controller.ext_tolerance == 0.02
    with pytest.raises(ConfigError, match="z_ext_tolerance"):
        algos.efx_mappo(z_ext_tolerance=-0.1).settings(env)
