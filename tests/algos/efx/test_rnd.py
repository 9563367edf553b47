"""Random network distillation as EFX's intrinsic reward and as ``mappo``'s bonus: the
module against a slow reference, the learner training the predictor on exactly the
rows the env runners scored with the weights it sent them (both sampling paths),
checkpoint, resume and evaluation at a chosen z."""

import copy

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm

from marllib_ext import algos, make_env
from marllib_ext.algos.efx import EFXJointCriticLearner
from marllib_ext.algos.efx.budget_range import with_resolved_budget
from marllib_ext.algos.ppo import JointCriticPPOLearner
from marllib_ext.algos.ppo.rnd_training import RND_LOSS, RND_REFERENCE, rnd_training_rows
from marllib_ext.errors import ConfigError
from marllib_ext.ops.novelty import rnd_bonus
from marllib_ext.policies.rnd import (
    RND_FEATURES,
    RND_HIDDENS,
    RND_INPUTS,
    RND_MODULE_ID,
    RND_SEED,
    RNDModule,
)
from marllib_ext.postprocessing.intrinsic_signals import INTRINSIC_REWARD
from marllib_ext.postprocessing.novelty_signals import RNDSignal
from marllib_ext.rllib_compat import local_learner, plain_module

COEF = 0.5


def rnd_module(inputs, seed=3):
    import gymnasium as gym

    return RNDModule(
        observation_space=gym.spaces.Box(-1, 1, (4,)),
        action_space=gym.spaces.Discrete(2),
        model_config={RND_INPUTS: inputs, RND_HIDDENS: [8], RND_FEATURES: 5, RND_SEED: seed},
    )


def reference_errors(pair, rows):
    """The slow reference: normalize, clip, run both MLPs layer by layer, mean squared gap."""
    out = []
    for row in rows:
        x = row.astype(np.float64)
        if float(pair.count) > 0:
            x = (x - pair.mean.numpy()) / np.sqrt(pair.var.numpy())
            x = np.clip(x, -5.0, 5.0)

        def run(net, x=x):
            h = x
            layers = list(net)
            for layer in layers:
                if isinstance(layer, torch.nn.Linear):
                    h = (
                        layer.weight.detach().double().numpy() @ h
                        + layer.bias.detach().double().numpy()
                    )
                else:
                    h = np.maximum(h, 0.0)
            return h

        out.append(np.mean((run(pair.target) - run(pair.predictor)) ** 2))
    return np.array(out)


def test_the_module_matches_a_slow_reference_and_its_target_is_seeded():
    module = rnd_module({"0": 4, "team_0": 6})
    rows = np.random.default_rng(0).normal(size=(7, 4))
    np.testing.assert_allclose(
        module.errors("0", rows), reference_errors(module.pairs["0"], rows), rtol=1e-5
    )
    module.pairs["0"].add_moments(rows * 3 + 1)
    np.testing.assert_allclose(
        module.errors("0", rows), reference_errors(module.pairs["0"], rows), rtol=1e-5
    )
    # The same seed gives the same target whatever torch's global generator did.
    torch.manual_seed(123)
    again = rnd_module({"0": 4, "team_0": 6})
    for a, b in zip(
        module.pairs["0"].target.parameters(), again.pairs["0"].target.parameters(), strict=True
    ):
        torch.testing.assert_close(a, b)
    assert not any(p.requires_grad for p in module.pairs["0"].target.parameters())


def test_the_signal_scores_rows_with_the_bound_and_refuses_without_a_module():
    signal = RNDSignal(
        coef=COEF,
        agents=["a", "b"],
        observation_dims={"a": 4, "b": 4},
        teams=[[0, 1]],
        scope="agent",
    )
    acted = np.array([[True, False], [True, True]])
    observations = {"a": np.ones((2, 4)), "b": np.zeros((2, 4))}
    with pytest.raises(RuntimeError, match="bind_module"):
        signal.rewards(logp=None, next_observations=observations, acted=acted)
    module = rnd_module({"0": 4, "1": 4})
    signal.module = {RND_MODULE_ID: module}
    # Before any update (reference 0) every acting agent earns c.
    np.testing.assert_allclose(
        signal.rewards(logp=None, next_observations=observations, acted=acted),
        [[COEF, 0], [COEF, COEF]],
    )
    module.reference.fill_(0.01)
    rewards = signal.rewards(logp=None, next_observations=observations, acted=acted)
    errors = module.errors("1", np.zeros((1, 4)))
    assert rewards[1, 1] == pytest.approx(float(rnd_bonus(errors, 0.01, coef=COEF)[0]))
    assert rewards[0, 1] == 0.0


class RecordingLearner(EFXJointCriticLearner):
    recorded: list = []  # (the RND module's state before the iteration's training, blocks)

    def train_batch(self, training_data):
        self._before = copy.deepcopy(plain_module(self.module, RND_MODULE_ID).state_dict())
        return super().train_batch(training_data)

    def block_batch(self, blocks, episodes=None):
        RecordingLearner.recorded.append((self._before, blocks))
        return super().block_batch(blocks, episodes)


def rnd_config(sampler, scope="agent", num_env_runners=0):
    env = make_env("grid:pass", size=5, max_steps=30)
    config = algos.efx_mappo(
        intrinsic_reward="rnd", intrinsic_coef=COEF, rnd_scope=scope, rnd_epochs=2,
        rnd_minibatch_size=256, num_env_runners=num_env_runners, num_envs_per_env_runner=2,
        train_batch_size=400, minibatch_size=200, num_epochs=1,
    ).rllib_config(env, seed=0, sampler=sampler)  # fmt: skip
    return config.learners(learner_class=RecordingLearner)


@pytest.mark.parametrize(("sampler", "scope"), [("auto", "agent"), ("per_world", "team")])
def test_runners_score_with_the_weights_the_learner_trained_on_the_rows_it_reads(
    ray_session, sampler, scope
):
    RecordingLearner.recorded.clear()
    algorithm = rnd_config(sampler, scope).build_algo()
    try:
        kind = "rollout blocks" if sampler == "auto" else "RLlib's per-world episodes"
        assert kind in algorithm.env_runner.sampling
        results = [algorithm.train() for _ in range(3)]
        spec = algorithm.config.rl_module_spec.rl_module_specs[RND_MODULE_ID]
    finally:
        algorithm.stop()
    for result in results:
        metrics = result["learners"][RND_MODULE_ID]
        assert metrics[RND_REFERENCE] < metrics[RND_LOSS]  # the update lowered the error
    reference = RNDModule(
        observation_space=spec.observation_space,
        action_space=spec.action_space,
        model_config=spec.model_config,
    )
    agents = spec.model_config["rnd_agents"]
    for index, (state, blocks) in enumerate(RecordingLearner.recorded):
        reference.load_state_dict(state)
        e_ref = float(reference.reference)
        assert (e_ref == 0) == (index == 0)
        rows = rnd_training_rows(blocks, spec.model_config)
        recorded = {
            a: np.concatenate(
                [np.asarray(b.outputs[a][INTRINSIC_REWARD]).reshape(-1) for b in blocks]
            )
            for a in agents
        }
        acted = {
            a: np.concatenate([b.alive[:, :, b.agents.index(a)].reshape(-1) for b in blocks])
            for a in agents
        }
        if scope == "agent":
            for i, agent in enumerate(agents):
                expected = rnd_bonus(reference.errors(str(i), rows[str(i)]), e_ref, coef=COEF)
                np.testing.assert_allclose(
                    recorded[agent][acted[agent]], expected, rtol=1e-4, atol=1e-6
                )
        else:  # both agents act at every grid step: each gets half the team's bonus
            expected = rnd_bonus(reference.errors("team_0", rows["team_0"]), e_ref, coef=COEF)
            for agent in agents:
                np.testing.assert_allclose(
                    recorded[agent][acted[agent]], expected / 2, rtol=1e-4, atol=1e-6
                )


def test_rnd_checkpoints_resumes_and_evaluates_at_a_chosen_z(ray_session, tmp_path):
    from marllib_ext.algos.evaluation import evaluate

    algorithm = rnd_config("auto", num_env_runners=1).build_algo()
    try:
        algorithm.train()
        trained = copy.deepcopy(
            plain_module(local_learner(algorithm).module, RND_MODULE_ID).state_dict()
        )
        algorithm.save_to_path(str(tmp_path / "checkpoint"))
    finally:
        algorithm.stop()
    restored = Algorithm.from_checkpoint(str(tmp_path / "checkpoint"))
    try:
        module = plain_module(local_learner(restored).module, RND_MODULE_ID)
        for key, value in trained.items():
            torch.testing.assert_close(module.state_dict()[key], value)
        result = restored.train()
        assert result["learners"][RND_MODULE_ID][RND_LOSS] > 0
    finally:
        restored.stop()
    evaluation = evaluate(str(tmp_path / "checkpoint"), episodes=2, z=5.0)
    assert evaluation.budget_z == pytest.approx(5.0)


class RecordingJointLearner(JointCriticPPOLearner):
    recorded: list = []

    def block_batch(self, blocks, episodes=None):
        RecordingJointLearner.recorded.append(blocks)
        return super().block_batch(blocks, episodes)


def test_mappo_adds_the_rnd_bonus(ray_session):
    RecordingJointLearner.recorded.clear()
    config = algos.mappo(
        intrinsic_bonus_coeff=0.2, intrinsic_bonus="rnd", num_env_runners=0,
        num_envs_per_env_runner=2, train_batch_size=400, minibatch_size=200, num_epochs=1,
    ).rllib_config(make_env("grid:pass", size=5, max_steps=30), seed=0)  # fmt: skip
    algorithm = config.learners(learner_class=RecordingJointLearner).build_algo()
    try:
        results = [algorithm.train() for _ in range(2)]
    finally:
        algorithm.stop()
    assert RND_LOSS in results[-1]["learners"][RND_MODULE_ID]
    values = np.concatenate(
        [
            np.asarray(b.outputs[a][INTRINSIC_REWARD])[b.alive[:, :, i]]
            for b in RecordingJointLearner.recorded[1]
            for i, a in enumerate(b.agents)
        ]
    )
    assert values.min() > 0 and values.max() < 1  # recorded with coefficient 1, bounded


def test_z_max_and_bad_settings_of_rnd():
    env = make_env("grid:pass", size=5, max_steps=30)

    def z_high(**overrides):
        settings = algos.efx_mappo(intrinsic_reward="rnd", intrinsic_coef=COEF, **overrides)
        return with_resolved_budget(settings.settings(env), env).z_high

    assert z_high() == pytest.approx(COEF * 30 * 2)
    assert z_high(rnd_scope="team") == pytest.approx(COEF * 30)
    for key, value in [("rnd_scope", "world"), ("rnd_epochs", 0), ("rnd_hiddens", [0])]:
        with pytest.raises(ConfigError, match=key):
            algos.efx_mappo(intrinsic_reward="rnd", **{key: value}).settings(env)
