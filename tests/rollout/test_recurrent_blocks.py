"""Recurrent actors on rollout blocks: the batched rollout carries each (agent, world)
state and records the state each step acted from; the learner's batch cuts each
agent's steps into sequences (``ops.sequences``) started from the recorded state, so
the learner's sequence forward reproduces the log-probabilities sampled step by step,
with resets at episode starts inside a sequence, deaths and action masks."""

import numpy as np
import pytest
import torch
import tree
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.training_data import TrainingData

from marllib_ext import algos, make_env
from marllib_ext.policies.joint_critic import is_critic_module
from marllib_ext.postprocessing.sequence_batch import recurrent_values
from marllib_ext.rllib_compat import (
    local_learner,
    plain_module,
    reset_before_next_sample,
)
from marllib_ext.rollout.recurrent import is_state_column, nested_state

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WORLDS = 4
MAX_SEQ_LEN = 4


def _algorithm(name, env, env_args, share_policy="all", **settings):
    small = {"train_batch_size": 400, "minibatch_size": 200, "num_epochs": 1, **settings}
    config = algos.get(name, use_rnn=True, max_seq_len=MAX_SEQ_LEN, **small).rllib_config(
        make_env(env, **env_args),
        share_policy=share_policy,
        seed=3,
        num_env_runners=0,
        num_envs_per_env_runner=WORLDS,
    )
    return config.build_algo()


def _on_learner(algorithm, fn):
    return next(iter(algorithm.learner_group.foreach_learner(fn))).get()


def _sampled_block(algorithm, steps=30):
    runner = algorithm.env_runner
    rollout = runner.array_rollout
    assert rollout.hands_blocks, algorithm.env_runner.sampling
    reset_before_next_sample(runner)
    runner.sample(num_timesteps=WORLDS * 7)  # worlds mid-episode when the block starts
    return rollout._block(rollout._run(steps, True, False))


def _logp_gaps(learner, block):
    """Per actor module: the largest gap between the sampled log-probabilities and the
    learner's sequence forward, the batch's rows and the module's present agent steps."""
    return _batch_logp_gaps(learner, learner.block_batch([block]), block)


def _batch_logp_gaps(learner, batch, block):
    gaps = {}
    for module_id, columns in batch.policy_batches.items():
        if is_critic_module(module_id):
            continue
        module = plain_module(learner.module, module_id)
        columns = dict(columns)
        mask = columns[Columns.LOSS_MASK]
        assert mask.dim() == 2 and mask.shape[1] == MAX_SEQ_LEN
        with torch.no_grad():
            out = module.forward_train(columns)
        dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        logp = dist.logp(columns[Columns.ACTIONS])
        gap = (logp - columns[Columns.ACTION_LOGP])[mask].abs().max().item()
        if isinstance(block, int):  # the agent steps counted from episodes
            agent_steps = block
        else:
            agents = [i for i, a in enumerate(block.agents) if block.module_of[a] == module_id]
            agent_steps = int(block.alive[:, :, agents].sum())
        gaps[module_id] = (
            gap,
            int(mask.sum()),
            agent_steps,
            columns[Columns.SEQ_LENS].tolist(),
            # no loss term reads padding: advantages and targets are 0 there
            float(columns[Columns.ADVANTAGES][~mask].abs().sum()),
        )
    return gaps


CASES = [
    ("mappo", "vmas:navigation", {"max_steps": 11}, {"hyperparam_source": "vmas"}),
    ("ippo", "vmas:navigation", {"max_steps": 11}, {"hyperparam_source": "vmas"}),
    ("vdppo", "mpe:simple_spread", {"max_cycles": 9}, {}),
    ("happo", "mpe:simple_spread", {"max_cycles": 9}, {"share_policy": "individual"}),
    ("efx_mappo", "mpe:simple_spread", {"max_cycles": 9}, {}),
    # action masks
    ("mappo", "toy:legal_moves", {"episode_length": 7}, {}),
    # an agent that dies while its world goes on
    ("mappo", "toy:come_and_go", {"episode_length": 9, "arrival_step": None}, {}),
    ("ippo", "toy:come_and_go", {"episode_length": 9, "arrival_step": None}, {}),
    ("mappo", "smax:3m", {}, {}),  # masks, deaths, SMAX's own state
]


@pytest.mark.parametrize("rnn_type", ["gru", pytest.param("lstm", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name,env,env_args,settings", CASES[:2])
def test_sequences_reproduce_sampled_logp_gru_and_lstm(
    ray_session, name, env, env_args, settings, rnn_type
):
    pytest.importorskip("vmas", reason="the vmas extra is not installed")
    _check_logp(name, env, env_args, {**settings, "rnn_type": rnn_type})


@pytest.mark.parametrize("name,env,env_args,settings", CASES[2:])
def test_sequences_reproduce_sampled_logp(ray_session, name, env, env_args, settings):
    if env.startswith("smax:"):
        pytest.importorskip("jaxmarl", reason="the smax extra is not installed")
    _check_logp(name, env, env_args, settings)


@pytest.mark.parametrize("name", ["mappo", "ippo"])
def test_rllib_episode_chunks_reproduce_sampled_logp(ray_session, name):
    """RLlib's own per-world sampling (agents that arrive late and die early refuse the
    arrays): the states RLlib recorded (``state_out``, the lookback before a chunk's
    first step) give the learner's sequences."""
    algorithm = _algorithm(name, "toy:come_and_go", {"episode_length": 9})
    try:
        runner = algorithm.env_runner
        assert runner.array_rollout is None
        runner.sample(num_timesteps=WORLDS * 5)  # worlds mid-episode after this
        episodes = runner.sample(num_timesteps=WORLDS * 13)
        assert any(e.env_t_started > 0 for e in episodes)  # chunks that continue one
        agent_steps = sum(e.agent_steps() for e in episodes)
        gaps = _on_learner(
            algorithm,
            lambda learner: _batch_logp_gaps(
                learner, _episode_batch(learner, episodes), agent_steps
            ),
        )
    finally:
        algorithm.stop()
    (gap, rows, steps, seq_lens, padding) = gaps["shared"]
    assert gap < 1e-4
    assert rows == steps  # every agent step once in the loss
    assert max(seq_lens) <= MAX_SEQ_LEN
    if name == "mappo":  # RLlib's connectors add a masked bootstrap row per chunk
        assert sum(seq_lens) == rows and padding == 0.0


def _episode_batch(learner, episodes):
    """The learner's batch of episode chunks (read as rollout blocks)."""
    return learner.train_batch(TrainingData(episodes=episodes))


def _check_logp(name, env, env_args, settings):
    algorithm = _algorithm(name, env, env_args, **settings)
    try:
        block = _sampled_block(algorithm)
        assert block.starts[1:].any()  # episodes start inside the block
        gaps = _on_learner(algorithm, lambda learner: _logp_gaps(learner, block))
    finally:
        algorithm.stop()
    assert gaps
    for module_id, (gap, rows, agent_steps, seq_lens, padding) in gaps.items():
        assert gap < 1e-4, (module_id, gap)
        assert rows == agent_steps == sum(seq_lens)  # every agent step once
        assert max(seq_lens) <= MAX_SEQ_LEN and min(seq_lens) >= 1
        assert padding == 0.0


def test_recurrent_values_equal_stepping_each_agent(ray_session):
    """``recurrent_values`` against a slow reference: each agent's steps one at a time
    from the state recorded at its first step, afresh where its episode starts; the
    value after a step from the state carried over it. The state each step carries
    into the next equals the one the rollout recorded there."""
    algorithm = _algorithm("ippo", "toy:come_and_go", {"episode_length": 9, "arrival_step": None})
    try:
        block = _sampled_block(algorithm, steps=20)
        module = plain_module(local_learner(algorithm).module, "shared")
        values, next_values = recurrent_values(module, block, 1, "cpu")  # agent_1 dies
        agent = block.agents[1]
        present = block.alive[:, :, 1]
        assert not present.all()  # it is absent after its death
        initial = module.get_initial_state()
        states = {
            c: v for c, v in block.outputs[agent].items() if is_state_column(c)
        }  # (T, B, ...)

        def one(array):
            return torch.as_tensor(array, dtype=torch.float32)[None, None]

        for world in range(WORLDS):
            state = None
            for t in np.flatnonzero(present[:, world]):
                recorded = nested_state(
                    {c: torch.as_tensor(v[t, world])[None] for c, v in states.items()}
                )
                if block.starts[t, world]:
                    state = tree.map_structure(lambda s: s[None], initial)
                elif state is None:  # the agent's first step in this block
                    state = recorded
                else:  # the state carried equals the one recorded
                    tree.map_structure(
                        lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), state, recorded
                    )
                with torch.no_grad():
                    batch = {Columns.OBS: one(block.observations[agent][t, world])}
                    value = module.compute_values({**batch, Columns.STATE_IN: state})
                    state = module.forward_train({**batch, Columns.STATE_IN: state})[
                        Columns.STATE_OUT
                    ]
                    after = {Columns.OBS: one(block.next_observations[agent][t, world])}
                    next_value = module.compute_values({**after, Columns.STATE_IN: state})
                assert values[t, world] == pytest.approx(float(value), abs=1e-5)
                assert next_values[t, world] == pytest.approx(float(next_value), abs=1e-5)
            assert np.all(values[~present[:, world], world] == 0)
    finally:
        algorithm.stop()


def test_recurrent_mappo_trains_and_evaluates(ray_session, tmp_path):
    """A user's run: recurrent mappo trains on the batched runner, checkpoints, and the
    checkpoint evaluates."""
    from marllib_ext.algos.evaluation import evaluate

    result = algos.get(
        "mappo", use_rnn=True, train_batch_size=400, minibatch_size=200, num_epochs=2
    ).fit(
        make_env("mpe:simple_spread", max_cycles=10),
        stop={"training_iteration": 2},
        local_dir=tmp_path,
        seed=0,
    )
    assert np.isfinite(result.final["episode_return_mean"])
    evaluated = evaluate(result.checkpoint_path, episodes=2)
    assert len(evaluated.team_returns) == 2


@pytest.mark.parametrize(
    "key,value", [("rnn_type", "transformer"), ("rnn_hidden_dim", 0), ("max_seq_len", 0)]
)
def test_bad_recurrent_settings_name_the_key(key, value):
    from marllib_ext.errors import ConfigError

    with pytest.raises(ConfigError, match=key):
        algos.get("mappo", use_rnn=True, **{key: value}).settings(make_env("mpe:simple_spread"))


def _on_policy_algorithms():
    from marllib_ext.algos.registry import ALGORITHMS

    return sorted(
        name
        for name, spec in ALGORITHMS.items()
        if not spec.capabilities.off_policy and not spec.capabilities.single_agent_only
    )


DEFAULT_TIER = ("happo",)  # HAPPO's factor over sequences; the others in the slow tier


@pytest.mark.parametrize(
    "name",
    [
        name if name in DEFAULT_TIER else pytest.param(name, marks=pytest.mark.slow)
        for name in _on_policy_algorithms()
    ],
)
def test_every_on_policy_algorithm_trains_recurrent_actors(ray_session, tmp_path, name):
    from marllib_ext.algos.registry import ALGORITHMS

    spec = ALGORITHMS[name]
    small = {"train_batch_size": 400, "minibatch_size": 200, "critic_minibatch_size": 200}
    small = {k: v for k, v in small.items() if k not in algos.get(name).spec.ignored_keys()}
    fields = {f for f in algos.get(name).settings("mpe:simple_spread").__dataclass_fields__}
    small = {k: v for k, v in small.items() if k in fields}
    if "a2c" in name or name in ("ipg", "coma"):  # one whole-batch step
        small.pop("minibatch_size", None)
    result = algos.get(name, use_rnn=True, max_seq_len=4, **small).fit(
        make_env("mpe:simple_spread", max_cycles=10),
        stop={"training_iteration": 2},
        share_policy="individual" if spec.capabilities.sequential else "all",
        local_dir=tmp_path,
        seed=0,
    )
    assert result.final["timesteps_total"] >= 800
    assert np.isfinite(result.final["episode_return_mean"])


def test_chunks_of_a_block_give_the_blocks_sequences(ray_session):
    """The same seeded steps handed over as a block and as the episode chunks built from
    it (read back by ``rollout.episode_blocks``) give the same sequences: equal
    sequence lengths, and equal valid rows of observations, actions, log-probabilities,
    advantages and the state each sequence starts from."""
    algorithm = _algorithm("mappo", "toy:come_and_go", {"episode_length": 9, "arrival_step": None})
    try:
        rollout = algorithm.env_runner.array_rollout
        reset_before_next_sample(algorithm.env_runner)
        algorithm.env_runner.sample(num_timesteps=WORLDS * 5)
        block = rollout._run(20, True, False)
        arrays, chunks = rollout._block(block), rollout._episodes(block)

        def both(learner):
            return learner.block_batch([arrays]), _episode_batch(learner, chunks)

        direct, from_chunks = _on_learner(algorithm, both)
    finally:
        algorithm.stop()

    def rows(columns):
        mask = columns[Columns.LOSS_MASK].numpy()
        state = np.concatenate(
            [s.numpy().reshape(len(mask), -1) for s in tree.flatten(columns[Columns.STATE_IN])],
            axis=1,
        )
        keys = [
            tuple(np.round(np.concatenate([o, [a, lp, adv], st]), 4))
            for seq, st in zip(range(len(mask)), state, strict=True)
            for o, a, lp, adv, valid in zip(
                columns[Columns.OBS][seq].numpy(),
                columns[Columns.ACTIONS][seq].numpy(),
                columns[Columns.ACTION_LOGP][seq].numpy(),
                columns[Columns.ADVANTAGES][seq].numpy(),
                mask[seq],
                strict=True,
            )
            if valid
        ]
        return sorted(keys), sorted(columns[Columns.SEQ_LENS].tolist())

    assert rows(direct.policy_batches["shared"]) == rows(from_chunks.policy_batches["shared"])
