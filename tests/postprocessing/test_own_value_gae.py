"""The independent family (``ippo``, ``ia2c``) builds one batch on both samplers: GAE
over each agent's own steps (``own_value_block_batch``), row for row RLlib's own GAE
connector on the same episode chunks, on envs whose agents move together, take turns,
arrive late and die early; and from a batched runner's block, row for row the batch of
the same steps handed over as chunks."""

import copy

import numpy as np
import pytest
from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate, GeneralAdvantageEstimation
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.training_data import TrainingData

from marllib_ext import algos, make_env
from marllib_ext.ops import standardize_valid
from marllib_ext.rllib_compat import plain_module, reset_before_next_sample

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WORLDS = 4
ENVS = {
    "toy:take_turns": {},  # AEC turns: rewards earned between an agent's turns
    "toy:come_and_go": {},  # an agent arrives at step 2, another dies at step 3
    "mpe:simple_spread": {"max_cycles": 20},
    "smax:3m": {"max_steps": 20},  # units that die, legal-action masks
}


def _algorithm(name, env):
    if env.startswith("smax:"):
        pytest.importorskip("jaxmarl", reason="the smax extra is not installed")
    settings = {"train_batch_size": 200, "num_epochs": 1, "minibatch_size": None}
    return (
        algos.get(name, **settings)
        .rllib_config(
            make_env(env, **ENVS[env]),
            share_policy="all",
            seed=5,
            num_env_runners=0,
            num_envs_per_env_runner=WORLDS,
        )
        .build_algo()
    )


def _on_learner(algorithm, fn):
    return next(iter(algorithm.learner_group.foreach_learner(fn))).get()


def _chunks(algorithm):
    """Episode chunks of one sample as training takes it: a batched runner's block cut
    mid-episode, read as chunks (with the block); the per-world runner's chunks (whole
    episodes on turn-taking envs, where an action completes at the agent's next turn)."""
    runner = algorithm.env_runner
    rollout = runner.array_rollout
    reset_before_next_sample(runner)
    if rollout is None:
        return runner.sample(), None
    runner.sample(num_timesteps=WORLDS * 7)  # worlds mid-episode when the block starts
    block = rollout._run(30, True, False)
    return rollout._episodes(block), rollout._block(block)


def _rllib_gae(learner, chunks):
    """RLlib's own PPO learner pipeline on the chunks: its default pieces, one
    bootstrap step per chunk and ``GeneralAdvantageEstimation``."""
    config = learner.config
    pipeline = config.build_learner_connector(None, None, device=learner.device)
    pipeline.prepend(AddOneTsToEpisodesAndTruncate())
    pipeline.append(GeneralAdvantageEstimation(gamma=config.gamma, lambda_=config.lambda_))
    return pipeline(rl_module=learner.module, batch={}, episodes=chunks, shared_data={})


def _observations(columns):
    obs = columns[Columns.OBS]
    obs = obs["observation"] if isinstance(obs, dict) else obs
    return np.asarray(obs, np.float64).reshape(len(obs), -1)


def _sorted_rows(observations, actions, *columns):
    """Rows ``[obs..., action..., columns...]`` in lexicographic order."""
    rows = np.concatenate(
        [
            np.round(observations, 5),
            np.asarray(actions, np.float64).reshape(len(observations), -1),
            *[np.asarray(c, np.float64).reshape(-1, 1) for c in columns],
        ],
        axis=1,
    )
    return rows[np.lexsort(rows.T[::-1])]


@pytest.mark.parametrize("name", ["ippo", "ia2c"])
@pytest.mark.parametrize("env", list(ENVS))
def test_own_value_batch_is_rllibs_gae_on_each_agents_steps(ray_session, name, env):
    algorithm = _algorithm(name, env)
    try:
        chunks, _ = _chunks(algorithm)

        def both(learner):
            ours = learner.train_batch(TrainingData(episodes=copy.deepcopy(chunks)))
            theirs = _rllib_gae(learner, copy.deepcopy(chunks))
            values = {
                module_id: plain_module(learner.module, module_id)
                .compute_values(dict(columns))
                .detach()
                .numpy()
                for module_id, columns in ours.policy_batches.items()
            }
            return ours, theirs, values

        ours, theirs, values = _on_learner(algorithm, both)
    finally:
        algorithm.stop()
    assert sorted(ours.policy_batches) == sorted(theirs)
    for module_id, their_columns in theirs.items():
        columns = ours.policy_batches[module_id]
        real = np.asarray(their_columns[Columns.LOSS_MASK], bool).reshape(-1)
        their_rows = _sorted_rows(
            _observations(their_columns)[real],
            np.asarray(their_columns[Columns.ACTIONS]).reshape(len(real), -1)[real],
            np.asarray(their_columns[Columns.VALUE_TARGETS]).reshape(-1)[real],
        )
        targets = columns[Columns.VALUE_TARGETS].numpy()
        our_rows = _sorted_rows(_observations(columns), columns[Columns.ACTIONS].numpy(), targets)
        assert our_rows.shape == their_rows.shape  # every agent step once, no bootstrap row
        np.testing.assert_allclose(our_rows, their_rows, atol=2e-5)
        # The advantages: the targets less V(o), standardized over the module's rows.
        expected = standardize_valid(targets - values[module_id], np.ones(len(targets), bool))
        np.testing.assert_allclose(columns[Columns.ADVANTAGES].numpy(), expected, atol=2e-5)


@pytest.mark.parametrize("name", ["ippo", "ia2c"])
@pytest.mark.parametrize("env", ["mpe:simple_spread", "smax:3m"])
def test_a_block_and_its_chunks_give_one_batch(ray_session, name, env):
    algorithm = _algorithm(name, env)
    try:
        chunks, block = _chunks(algorithm)
        assert block is not None, "the env samples through the batched runner"
        direct, from_chunks = _on_learner(
            algorithm,
            lambda learner: (
                learner.block_batch([block]),
                learner.train_batch(TrainingData(episodes=chunks)),
            ),
        )
    finally:
        algorithm.stop()
    keys = (Columns.ADVANTAGES, Columns.VALUE_TARGETS, Columns.ACTION_LOGP)
    for module_id, columns in from_chunks.policy_batches.items():
        ours = direct.policy_batches[module_id]
        assert len(ours) == len(columns)
        np.testing.assert_allclose(
            _sorted_rows(_observations(ours), ours[Columns.ACTIONS].numpy(), *map(ours.get, keys)),
            _sorted_rows(
                _observations(columns), columns[Columns.ACTIONS].numpy(), *map(columns.get, keys)
            ),
            atol=1e-5,
        )
