"""coma on real RLlib batches: each agent's rows get its own counterfactual advantage
from the team critic; continuous actions are refused before anything starts."""

import copy
import math

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.training_data import TrainingData

from marllib_ext import algos
from marllib_ext.algos.coma import COMAAdvantageConnector, COMALearner
from marllib_ext.errors import ConfigError
from marllib_ext.ops.coma import critic_inputs
from tests.algos.ppo.test_learning import RANDOM_AGENT_RETURN
from tests.helpers import N_AGENTS, counter_config

RECORDED = []


class RecordingCOMAConnector(COMAAdvantageConnector):
    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        critic = copy.deepcopy(rl_module[self.critic_module_id])
        batch = super().__call__(rl_module=rl_module, batch=batch, episodes=episodes, **kwargs)
        RECORDED.append(
            {
                "critic": critic,
                "modules": {
                    mid: {
                        c: batch[mid][c].detach().cpu().numpy()
                        for c in (
                            Columns.OBS,
                            Columns.ACTIONS,
                            Columns.ACTION_DIST_INPUTS,
                            Columns.LOSS_MASK,
                            Columns.ADVANTAGES,
                        )
                    }
                    for mid in batch
                    if not mid.startswith("joint_critic")
                },
            }
        )
        return batch


class RecordingCOMALearner(COMALearner):
    advantage_connector_class = RecordingCOMAConnector


def test_each_agent_gets_its_counterfactual_advantage(ray_session):
    RECORDED.clear()
    config = counter_config(
        "coma", "test:counter", RecordingCOMALearner, "all", minibatch_size=None
    )
    algorithm = config.build_algo()
    try:
        algorithm.train()
    finally:
        algorithm.stop()
    checked = 0
    for record in RECORDED:
        # (expected raw advantage, recorded advantage) of every valid actor row.
        pairs = []
        # Rows keyed by (episode uid, step, agent index) from CounterEnv's observations.
        steps = {}
        for columns in record["modules"].values():
            for obs, action, logits, valid, advantage in zip(
                columns[Columns.OBS],
                columns[Columns.ACTIONS],
                columns[Columns.ACTION_DIST_INPUTS],
                columns[Columns.LOSS_MASK],
                columns[Columns.ADVANTAGES],
                strict=True,
            ):
                if valid:
                    uid, t, i = (int(x) for x in obs)
                    steps.setdefault((uid, t), {})[i] = (obs, int(action), logits, advantage)
        for agents in steps.values():
            assert sorted(agents) == list(range(N_AGENTS))
            state = np.concatenate([agents[i][0] for i in range(N_AGENTS)])[None]
            actions = np.array([[agents[i][1] for i in range(N_AGENTS)]])
            inputs = torch.as_tensor(critic_inputs(state, actions, n_actions=2)[0])
            with torch.no_grad():
                q = record["critic"].q_values(inputs).double().numpy()  # (n_agents, 2)
            for i in range(N_AGENTS):
                logits = agents[i][2]
                pi = np.exp(logits - logits.max())
                pi /= pi.sum()
                pairs.append((q[i, actions[0, i]] - pi @ q[i], agents[i][3]))
        # Standardized over the team's valid rows of all agents.
        expected, recorded = np.array(pairs).T
        expected = (expected - expected.mean()) / expected.std()
        np.testing.assert_allclose(recorded, expected, atol=1e-3)
        checked += len(pairs)
    assert checked > 50


class CountingCOMALearner(COMALearner):
    calls: list = []

    def critic_loss(self, *, module_id, config, batch, fwd_out):
        CountingCOMALearner.calls.append(("critic", len(batch[Columns.VALUE_TARGETS])))
        return super().critic_loss(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)

    def actor_loss(self, *, module_id, config, batch, fwd_out):
        CountingCOMALearner.calls.append(("actor", len(batch[Columns.ADVANTAGES])))
        return super().actor_loss(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)


@pytest.mark.parametrize("critic_minibatch_size", [None, pytest.param(40, marks=pytest.mark.slow)])
def test_critic_takes_its_epochs_the_actors_one_step(ray_session, critic_minibatch_size):
    CountingCOMALearner.calls = []
    config = counter_config(
        "coma",
        "test:counter",
        CountingCOMALearner,
        "all",
        minibatch_size=None,
        critic_epochs=3,
        critic_minibatch_size=critic_minibatch_size,
    )
    algorithm = config.build_algo()
    try:
        algorithm.train()
    finally:
        algorithm.stop()
    calls = CountingCOMALearner.calls
    rows = calls[-1][1]  # the actors' whole batch; the critic has one row per actor row
    assert rows >= 48 * N_AGENTS
    if critic_minibatch_size is None:
        critic_calls = [("critic", rows)] * 3
    else:
        critic_calls = [("critic", critic_minibatch_size)] * (3 * math.ceil(rows / 40))
    # The critic's passes first, then the actors' single step on the whole batch.
    assert calls == [*critic_calls, ("actor", rows)]


def test_critic_schedule_is_validated():
    with pytest.raises(ConfigError, match="critic_epochs"):
        algos.coma(critic_epochs=0).settings("mpe:simple_spread")
    with pytest.raises(ConfigError, match="critic_minibatch_size"):
        algos.coma(critic_minibatch_size=0).settings("mpe:simple_spread")


def test_continuous_actions_are_refused_before_anything_starts():
    with pytest.raises(ConfigError, match="discrete actions only"):
        algos.coma().rllib_config("toy:continuous_target")


@pytest.mark.slow
def test_coma_learns_coordination_beyond_random(ray_session, tmp_path):
    result = algos.coma().fit(
        "toy:coordination",
        stop={"training_iteration": 15},
        share_policy="all",
        seed=0,
        local_dir=tmp_path,
        num_env_runners=0,
    )
    assert result.final["agent_return_mean"] > 2 * RANDOM_AGENT_RETURN, result.progress


def test_agents_that_arrive_and_leave_get_finite_targets(ray_session):
    """On ``toy:come_and_go`` (an agent arrives late, another leaves; episode chunks,
    read as blocks) every critic target and advantage is finite: an absent agent's
    policy enters no baseline (the former chunk connector wrote NaN targets there)."""
    from marllib_ext.rollout.episode_blocks import blocks_of_chunks

    config = algos.coma(
        hyperparam_source="toy", minibatch_size=None, num_env_runners=0, num_envs_per_env_runner=2
    ).rllib_config("toy:come_and_go", seed=0)
    algorithm = config.build_algo()
    try:
        chunks = algorithm.env_runner.sample(num_timesteps=200)
        blocks = blocks_of_chunks(chunks)
        assert any((~block.alive).any() for block in blocks)  # someone was absent

        def batch_of(learner):
            batch = learner.train_batch(TrainingData(episodes=chunks))
            return {
                mid: {c: batch[mid][c].numpy() for c in ("value_targets", "loss_mask")}
                for mid in batch.policy_batches
            }

        batch = next(iter(algorithm.learner_group.foreach_learner(batch_of))).get()
        for columns in batch.values():
            assert np.isfinite(columns["value_targets"][columns["loss_mask"]]).all()
        result = algorithm.train()
        assert math.isfinite(result["learners"]["joint_critic"]["vf_loss"])
    finally:
        algorithm.stop()
