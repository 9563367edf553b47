"""The recurrent central critic (``critic_use_rnn``) on rollout blocks and episode
chunks: its batch is sequences started from the state its block pass entered them
with, so the learner's sequence forward reproduces the values GAE used; a user's run
trains, checkpoints and evaluates; the families whose critic cannot be recurrent yet
refuse it by name."""

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.training_data import TrainingData

from marllib_ext import algos, make_env
from marllib_ext.errors import ConfigError
from marllib_ext.policies.joint_critic import CRITIC_MODULE_ID, OLD_VALUES, STATE
from marllib_ext.rllib_compat import local_learner, plain_module, reset_before_next_sample

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WORLDS = 4
MAX_SEQ_LEN = 4


def _algorithm(name="mappo", **settings):
    settings = {
        "train_batch_size": 400, "minibatch_size": 200, "num_epochs": 1, "use_rnn": True,
        "critic_use_rnn": True, "max_seq_len": MAX_SEQ_LEN, "value_clip": 0.2, **settings,
    }  # fmt: skip
    config = algos.get(name, **settings).rllib_config(
        make_env("toy:come_and_go", episode_length=9, arrival_step=None),
        share_policy="all", seed=3, num_env_runners=0, num_envs_per_env_runner=WORLDS,
    )  # fmt: skip
    return config.build_algo()


def _sampled(algorithm, steps=20):
    runner = algorithm.env_runner
    rollout = runner.array_rollout
    reset_before_next_sample(runner)
    runner.sample(num_timesteps=WORLDS * 5)  # worlds mid-episode when the block starts
    return rollout._run(steps, True, False)


def _critic_gap(learner, batch) -> tuple[float, dict]:
    """The largest gap between the critic's sequence forward and the values the batch
    was built with (``old_values``, kept by ``value_clip``) on the valid positions."""
    columns = dict(batch.policy_batches[CRITIC_MODULE_ID])
    critic = plain_module(learner.module, CRITIC_MODULE_ID)
    with torch.no_grad():
        out = critic.forward_train(columns)[Columns.VF_PREDS]
    mask = columns[Columns.LOSS_MASK]
    return float((out - columns[OLD_VALUES])[mask].abs().max()), columns


@pytest.mark.parametrize(
    ("name", "settings"), [("mappo", {}), ("mappo", {"value_norm": True}), ("vdppo", {})]
)
def test_critic_sequences_reproduce_the_block_values(ray_session, name, settings):
    """The central critic's (with value normalization: GAE's values de-normalized, the
    kept ones normalized again) and the VD critic's (agents that arrive and die: an
    absent agent's head reads zeros, its state runs on)."""
    algorithm = _algorithm(name, **settings)
    try:
        if settings:
            algorithm.train()  # value normalization's moments move off their start
        block = algorithm.env_runner.array_rollout._block(_sampled(algorithm))
        learner = local_learner(algorithm)
        gap, columns = _critic_gap(learner, learner.block_batch([block]))
    finally:
        algorithm.stop()
    mask = columns[Columns.LOSS_MASK]
    assert mask.shape[1] == MAX_SEQ_LEN and columns[STATE].dim() == 3
    assert int(columns[Columns.SEQ_LENS].sum()) == int(mask.sum()) == block.env_steps()
    assert gap < 1e-5
    # Episodes start inside the block: some sequences are cut short there.
    assert block.starts[1:].any() and int(columns[Columns.SEQ_LENS].min()) < MAX_SEQ_LEN
    assert not torch.any(columns[STATE][~mask])  # padding reads zeros
    if name == "vdppo":
        assert not block.alive.all()  # agents come and go
        assert columns[Columns.STATE_IN]["h"].shape[1] == len(block.agents)


@pytest.mark.parametrize("name", ["mappo", "vdppo"])
def test_chunks_of_a_block_give_the_same_critic_rows(ray_session, name):
    """The same seeded steps as a block and as episode chunks: the critic's valid rows
    (state, value target, old value) are the same multiset, and the chunk path's
    sequence forward also reproduces its values."""
    algorithm = _algorithm(name)
    try:
        raw = _sampled(algorithm)
        rollout = algorithm.env_runner.array_rollout
        arrays, chunks = rollout._block(raw), rollout._episodes(raw)
        learner = local_learner(algorithm)
        gap_block, direct = _critic_gap(learner, learner.block_batch([arrays]))
        batch = learner.train_batch(TrainingData(episodes=chunks))
        gap_chunks, from_chunks = _critic_gap(learner, batch)
    finally:
        algorithm.stop()

    def rows(columns):
        mask = columns[Columns.LOSS_MASK]
        parts = [
            columns[STATE][mask],
            columns[Columns.VALUE_TARGETS][mask][:, None],
            columns[OLD_VALUES][mask][:, None],
        ]
        return sorted(map(tuple, np.round(torch.cat(parts, 1).numpy(), 4)))

    assert gap_block < 1e-5 and gap_chunks < 1e-5
    assert rows(direct) == rows(from_chunks)


@pytest.mark.parametrize(
    "name",
    [
        "mappo",
        *(pytest.param(n, marks=pytest.mark.slow) for n in ("vdppo", "efx_mappo", "efx_vdppo")),
    ],
)
def test_recurrent_critic_trains_and_evaluates(ray_session, tmp_path, name):
    """A user's run: rMAPPO (recurrent actor and critic) trains on the batched runner,
    checkpoints, restores and evaluates."""
    from marllib_ext.algos.evaluation import evaluate

    result = algos.get(
        name, use_rnn=True, critic_use_rnn=True, max_seq_len=4, train_batch_size=400,
        minibatch_size=200, num_epochs=2,
    ).fit(
        make_env("mpe:simple_spread", max_cycles=10),
        stop={"training_iteration": 2}, local_dir=tmp_path, seed=0,
    )  # fmt: skip
    assert np.isfinite(result.final["episode_return_mean"])
    assert len(evaluate(result.checkpoint_path, episodes=2).team_returns) == 2


@pytest.mark.parametrize("name", ["happo", "coma", "mappo_lag"])
def test_families_without_a_recurrent_critic_refuse_it(ray_session, name):
    with pytest.raises(ConfigError, match="critic_use_rnn"):
        algos.get(name, critic_use_rnn=True).rllib_config(
            make_env("mpe:simple_spread", max_cycles=10),
            share_policy="individual",
            num_env_runners=0,
        )


def test_feed_forward_actor_with_recurrent_critic(ray_session):
    """The critic's recurrence does not need the actors': a feed-forward actor's batch
    stays rows, the critic's becomes sequences."""
    algorithm = _algorithm(use_rnn=False)
    try:
        block = algorithm.env_runner.array_rollout._block(_sampled(algorithm))
        learner = local_learner(algorithm)
        batch = learner.block_batch([block])
        gap, _ = _critic_gap(learner, batch)
    finally:
        algorithm.stop()
    assert gap < 1e-5
    actor = batch.policy_batches["shared"]
    assert actor[Columns.ACTIONS].dim() == 1


@pytest.mark.slow
def test_two_data_parallel_learners_train_a_recurrent_critic(ray_session):
    """Each learner builds its critic's sequences from its share of the worlds; torch
    DDP keeps the two identical."""
    from tests.data_parallel import assert_learners_identical, two_learner_algorithm

    algorithm = two_learner_algorithm("mappo", use_rnn=True, critic_use_rnn=True, max_seq_len=4)
    try:
        result = algorithm.train()
        assert_learners_identical(algorithm)
    finally:
        algorithm.stop()
    assert np.isfinite(result["env_runners"]["episode_return_mean"])
