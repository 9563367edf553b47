"""A batched runner hands ``RolloutBlock`` arrays to every on-policy learner; the batch
a learner builds from them (``postprocessing.block_batch``, COMA's ``coma.batch``) is
the one its learner connector builds from the same steps handed over as episode chunks
(read back as blocks by ``rollout.episode_blocks``), row for row."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.training_data import TrainingData

from marllib_ext import algos, make_env
from marllib_ext.algos.coma.learner import COMALearner
from marllib_ext.algos.env_checks import log_contract_breaches
from marllib_ext.algos.ppo.learners import JointCriticPPOLearner
from marllib_ext.policies.coma_critic import COMA_INPUTS
from marllib_ext.policies.joint_critic import STATE
from marllib_ext.postprocessing.block_batch import TEAM_ROW
from marllib_ext.postprocessing.cost_advantage import COST_ADVANTAGES, COST_VALUE_TARGETS
from marllib_ext.postprocessing.efx_advantage import PUSH_ADVANTAGES
from marllib_ext.rllib_compat import reset_before_next_sample
from marllib_ext.rollout.blocks import RolloutBlock
from marllib_ext.rollout.direct import EpisodeTally, block_refusal

pytest.importorskip("vmas", reason="the vmas extra is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WORLDS = 4


def _algorithm(name="mappo", env="vmas:navigation", share_policy="all", **settings):
    source = {"hyperparam_source": "vmas"} if env.startswith("vmas:") else {}
    small = {"train_batch_size": 400, "minibatch_size": 200, "num_epochs": 1, **settings}
    ignored = algos.get(name).spec.ignored_keys()  # e.g. trust-region actors' minibatches
    small = {key: value for key, value in small.items() if key not in ignored}
    length = {"max_cycles": 20} if env.startswith("mpe:") else {"max_steps": 20}
    config = algos.get(name, **source, **small).rllib_config(
        make_env(env, **length),
        share_policy=share_policy,
        seed=3,
        num_env_runners=0,
        num_envs_per_env_runner=WORLDS,
    )
    return config.build_algo()


def _on_learner(algorithm, fn):
    return next(iter(algorithm.learner_group.foreach_learner(fn))).get()


def _rows(columns, keys):
    """Row key (observation, action) -> the row's values of ``keys``."""
    obs = columns[Columns.OBS]
    obs = obs["observation"] if isinstance(obs, dict) else obs
    out = {}
    for i in range(len(obs)):
        key = (
            tuple(np.round(obs[i].numpy(), 5)),
            tuple(np.atleast_1d(columns[Columns.ACTIONS][i].numpy())),
        )
        out[key] = [float(columns[k][i]) for k in keys]
    return out


def _both_batches(name, env, share_policy="all", **settings):
    """``(block arrays, block batch, connector batch)`` of one 30-step block sampled
    with worlds mid-episode when it starts (every world ends one episode inside it)."""
    if env.startswith("smax:"):
        pytest.importorskip("jaxmarl", reason="the smax extra is not installed")
    algorithm = _algorithm(name, env=env, share_policy=share_policy, **settings)
    try:
        runner = algorithm.env_runner
        rollout = runner.array_rollout
        assert rollout.hands_blocks, runner.sampling
        reset_before_next_sample(runner)
        runner.sample(num_timesteps=WORLDS * 15)
        block = rollout._run(30, True, False)
        arrays = rollout._block(block)
        chunks = rollout._episodes(block)
        direct, connectors = _on_learner(
            algorithm,
            lambda learner: (
                learner.block_batch([arrays]),
                learner.train_batch(TrainingData(episodes=chunks)),
            ),
        )
    finally:
        algorithm.stop()
    return arrays, direct, connectors


def _real_rows(columns):
    """A connector batch's columns on its loss-mask rows (no bootstrap rows)."""
    mask = columns[Columns.LOSS_MASK]
    return {
        k: (v[mask] if not isinstance(v, dict) else {n: t[mask] for n, t in v.items()})
        for k, v in columns.items()
    }


@pytest.mark.parametrize(
    "name,env,settings",
    [
        ("mappo", "vmas:navigation", {}),
        ("mappo", "vmas:navigation", {"value_norm": True, "value_clip": 0.2}),
        ("mappo", "smax:3m", {}),  # action masks, units that die, SMAX's own state
        ("vdppo", "vmas:navigation", {}),  # the VD critic reads each agent's observation
        ("vdppo", "smax:3m", {}),
        ("happo", "vmas:navigation", {"share_policy": "individual"}),  # TEAM_ROW
        # EFX: the budget in the observations and the critic's state, the conservative
        # advantage over each world's segments
        ("efx_mappo", "vmas:navigation", {}),
        ("efx_mappo", "vmas:navigation", {"efx_advantage": "seed_dp"}),
        ("efx_mappo", "smax:3m", {}),
        ("efx_vdppo", "vmas:navigation", {}),
        ("efx_happo", "vmas:navigation", {"share_policy": "individual"}),
        # safe MARL: the cost GAE on V_c and the Lagrangian (or CUP's reward-only)
        # advantage, from costs in the arrays of copies of MPE
        ("mappo_lag", "mpe:simple_spread", {}),
        ("mappo_cup", "mpe:simple_spread", {}),
        # COMA: the counterfactual advantage per agent, Q's targets per (step, agent)
        ("coma", "mpe:simple_spread", {"minibatch_size": None}),
        # the push on each agent's rows, in the advantages or in its own column
        *[
            (
                "efx_mappo",
                "vmas:navigation",
                {
                    "efx_advantage": "demand_push",
                    "push_gradient": push,
                    "z_low": 0.0,
                    "z_high": 1000.0,
                },
            )
            for push in ("policy", "temperature")
        ],
    ],
)
def test_block_batch_is_the_connectors_batch(ray_session, name, env, settings):
    arrays, direct, connectors = _both_batches(name, env, **settings)
    keys = [Columns.ADVANTAGES, Columns.VALUE_TARGETS, Columns.ACTION_LOGP]
    for module_id, theirs in connectors.policy_batches.items():
        ours = direct.policy_batches[module_id]
        if PUSH_ADVANTAGES in theirs:
            keys = [*keys, PUSH_ADVANTAGES]
            assert np.abs(theirs[PUSH_ADVANTAGES].numpy()).max() > 0  # the push acted
        if COST_ADVANTAGES in theirs:
            keys = [*keys, COST_ADVANTAGES]
            assert np.abs(theirs[COST_ADVANTAGES].numpy()).max() > 0  # costs were there
        mask = theirs[Columns.LOSS_MASK]
        if module_id == "joint_critic" and COMA_INPUTS in theirs:  # one row per agent
            for column in (Columns.VALUE_TARGETS, COMA_INPUTS):
                np.testing.assert_allclose(
                    np.sort(ours[column][ours[Columns.LOSS_MASK]].numpy(), axis=0),
                    np.sort(theirs[column][mask].numpy(), axis=0),
                    atol=1e-5,
                )
            continue
        if module_id == "joint_critic":
            assert len(ours) == int(mask.sum()) == len(arrays)
            ours_targets = sorted(ours[Columns.VALUE_TARGETS].tolist())
            np.testing.assert_allclose(
                ours_targets, sorted(theirs[Columns.VALUE_TARGETS][mask].tolist()), atol=1e-5
            )
            assert ours[STATE].shape[1] == theirs[STATE].shape[1]
            if COST_VALUE_TARGETS in theirs:
                np.testing.assert_allclose(
                    sorted(ours[COST_VALUE_TARGETS].tolist()),
                    sorted(theirs[COST_VALUE_TARGETS][mask].tolist()),
                    atol=1e-5,
                )
            continue
        ours_rows, their_rows = _rows(ours, keys), _rows(_real_rows(theirs), keys)
        assert len(ours) == int(mask.sum()) == len(ours_rows) == len(their_rows)
        assert ours_rows.keys() == their_rows.keys()
        for key, values in ours_rows.items():
            np.testing.assert_allclose(values, their_rows[key], rtol=1e-4, atol=1e-5)
        if TEAM_ROW in theirs:  # each actor row points at its team step's critic row
            for batch in (direct, connectors):
                actor, critic = batch.policy_batches[module_id], batch["joint_critic"]
                rows = actor[TEAM_ROW].long()
                np.testing.assert_allclose(
                    actor[Columns.VALUE_TARGETS], critic[Columns.VALUE_TARGETS][rows], atol=1e-5
                )


TAKE_BLOCKS = [
    "ippo", "ia2c", "ipg", "itrpo", "mappo", "maa2c", "matrpo", "vdppo", "vda2c", "efx_mappo",
    "efx_vdppo",
]  # fmt: skip
TAKE_BLOCKS_INDIVIDUAL = ["happo", "hatrpo", "efx_happo", "efx_hatrpo"]  # one policy per agent
SAFE = ["mappo_lag", "mappo_pid_lag", "mappo_cup", "mappo_focops"]  # need an env with costs
DISCRETE = ["coma"]  # one Q per action


def test_every_on_policy_learner_takes_blocks():
    """Every on-policy learner builds its batch from blocks: the own-value family, the
    joint critics' one builder (which episode chunks reach as blocks) and COMA's."""
    on_policy = [n for n in algos.ALGORITHMS if algos.get(n).spec.schedule is not None]
    assert sorted(on_policy) == sorted([*TAKE_BLOCKS, *TAKE_BLOCKS_INDIVIDUAL, *SAFE, *DISCRETE])
    for name in on_policy:
        env = "toy:continuous_target" if name not in DISCRETE else "toy:coordination"
        learner_class = algos.get(name).rllib_config(env, share_policy="individual").learner_class
        assert learner_class.rollout_block_refusal() is None, name


def test_each_runner_decides_how_it_samples_when_it_is_built(ray_session):
    """Decided once when the runner is built: rollout blocks (EFX's budget connector
    included: it has an array form; copies of a plain PettingZoo env too; COMA)."""
    expected = {
        ("mappo", "vmas:navigation"): "sampling: rollout blocks",
        ("efx_mappo", "vmas:navigation"): "sampling: rollout blocks",
        ("mappo_lag", "mpe:simple_spread"): "sampling: rollout blocks",
        ("coma", "mpe:simple_spread"): "sampling: rollout blocks",
    }
    for (name, env), sampling in expected.items():
        one_step = {"minibatch_size": None} if name == "coma" else {}
        algorithm = _algorithm(name, env=env, **one_step)
        try:
            assert algorithm.env_runner.sampling == sampling
        finally:
            algorithm.stop()


@pytest.mark.parametrize("name", SAFE)
def test_safe_marl_trains_on_blocks_and_steps_its_multiplier(ray_session, name):
    """Costs reach the learner in the block's arrays and the episode costs the
    multiplier steps on come from the runner's tally (``log_episode_cost``'s array
    form), as from chunks."""
    algorithm = _algorithm(name, env="mpe:simple_spread", cost_limit=0.0)
    try:
        multipliers = []
        for _ in range(2):
            result = algorithm.train()
            multipliers.append(result["safe"]["cost_multiplier"])
        assert algorithm.env_runner.sampling == "sampling: rollout blocks"
        assert result["learners"]["__all_modules__"]["block_batch_timer"] > 0
        runners = result["env_runners"]
        assert runners["safe_episodes_done"] == 20  # 400 steps of 20-step episodes
        assert result["safe"]["episode_cost_mean"] > 0  # agents collide in MPE
        assert math.isfinite(runners["episode_return_mean"])
        if name != "mappo_cup":  # CUP's projection keeps no Lagrangian step
            assert multipliers[1] > multipliers[0]  # costs above the limit of 0
    finally:
        algorithm.stop()


@pytest.mark.parametrize("name", TAKE_BLOCKS + TAKE_BLOCKS_INDIVIDUAL)
def test_trains_on_blocks_and_reports_episodes(ray_session, name):
    share_policy = "individual" if name in TAKE_BLOCKS_INDIVIDUAL else "all"
    one_step = {"minibatch_size": None} if name in ("ia2c", "ipg", "maa2c", "vda2c") else {}
    if "trpo" in name:
        one_step = {"critic_minibatch_size": 200}
    algorithm = _algorithm(name, share_policy=share_policy, **one_step)
    try:
        for _ in range(2):
            result = algorithm.train()
        assert algorithm.env_runner.sampling == "sampling: rollout blocks"
        runners = result["env_runners"]
        assert runners["num_env_steps_sampled"] == 400
        assert runners["episode_len_mean"] == 20
        assert math.isfinite(runners["episode_return_mean"])
        assert set(runners["agent_episode_returns_mean"]) == set(
            make_env("vmas:navigation").layout.agents
        )
        losses = [
            value
            for metrics in result["learners"].values()
            for key, value in metrics.items()
            if key in ("total_loss", "policy_loss", "vf_loss")
        ]
        assert losses and all(math.isfinite(loss) for loss in losses)
        assert result["learners"]["__all_modules__"]["block_batch_timer"] > 0
        samples = algorithm.env_runner.sample(num_timesteps=40)
        assert len(samples) == 1 and isinstance(samples[0], RolloutBlock)
    finally:
        algorithm.stop()


@pytest.mark.slow  # starts a remote env runner
def test_a_remote_runner_hands_blocks_to_the_driver_learner(ray_session):
    config = algos.get(
        "mappo", hyperparam_source="vmas", train_batch_size=400, minibatch_size=200, num_epochs=1
    ).rllib_config(
        make_env("vmas:navigation", max_steps=20), seed=3, num_env_runners=1,
        num_envs_per_env_runner=WORLDS,
    )  # fmt: skip
    algorithm = config.build_algo()
    try:
        result = algorithm.train()
        choices = algorithm.env_runner_group.foreach_env_runner(
            lambda runner: runner.sampler_choice, local_env_runner=False
        )
        assert [choice.kind for choice in choices] == ["rollout blocks"]
        assert result["env_runners"]["num_env_steps_sampled"] == 400
        assert result["learners"]["__all_modules__"]["block_batch_timer"] > 0
        assert math.isfinite(result["env_runners"]["episode_return_mean"])
    finally:
        algorithm.stop()


class RecordingRunner:
    """What ``EpisodeTally`` needs of an env runner: its config and the episode-metrics
    logger (recording each call)."""

    def __init__(self, smoothing):
        self.config = SimpleNamespace(
            metrics_num_episodes_for_smoothing=smoothing, num_env_runners=0
        )
        self.logged = []

    def _log_episode_metrics(self, length, ret, sec, agents, modules, agent_steps):
        self.logged.append((length, ret, agents, modules, agent_steps))


def test_the_tally_logs_each_ended_episode_up_to_the_metrics_window():
    """One world ends an episode every 2 steps, another at step 5 of 6: four episodes
    end in the call; with a window of 3 the last three are logged, in order, with
    their lengths and per-agent and per-module returns."""
    T, B = 6, 2
    terminated = np.zeros((T, B), bool)
    terminated[[1, 3, 5], 0] = True
    terminated[4, 1] = True
    rewards = np.zeros((T, B, 2))
    rewards[:, 0, 0] = np.arange(T)  # world 0, agent a: 0, 1, 2, ...
    rewards[:, 1, 1] = 1.0
    block = SimpleNamespace(
        terminated=terminated, truncated=np.zeros((T, B), bool), rewards=rewards,
        alive=np.ones((T, B, 2), bool),
    )  # fmt: skip
    for smoothing, expected_count in ((3, 3), (100, 4)):
        runner = RecordingRunner(smoothing)
        tally = EpisodeTally(runner, ["a", "b"], {"a": "m", "b": "m"}, B)
        tally.add(block, np.zeros(B), np.arange(T, dtype=float))
        assert len(runner.logged) == expected_count
    everything = [(2, 1.0), (2, 5.0), (5, 5.0), (2, 9.0)]  # (length, return) in end order
    assert [(length, ret) for length, ret, *_ in runner.logged] == everything
    runner = RecordingRunner(3)
    tally = EpisodeTally(runner, ["a", "b"], {"a": "m", "b": "m"}, B)
    tally.add(block, np.zeros(B), np.arange(T, dtype=float))
    assert [(length, ret) for length, ret, *_ in runner.logged] == everything[-3:]
    length, ret, agents, modules, steps = runner.logged[1]  # world 1's episode
    assert agents == {"a": 0.0, "b": 5.0} and modules == {"m": 5.0}
    assert steps == {"a": 5, "b": 5}


def _config(**config):
    """What ``block_refusal`` reads of an env runner's config."""
    defaults = dict(
        in_evaluation=False, learner_class=JointCriticPPOLearner, num_learners=0,
        callbacks_on_sample_end=None, callbacks_on_episode_end=[log_contract_breaches],
    )  # fmt: skip
    return SimpleNamespace(**{**defaults, **config})


class EpisodeEndCallback(RLlibCallback):
    def on_episode_end(self, **kwargs):
        pass


def test_who_refuses_blocks():
    def count_samples(**kwargs):
        pass

    assert block_refusal(_config(), []) is None  # the contract check alone
    # data-parallel learners take one block each where the worlds split evenly
    assert block_refusal(_config(num_learners=2, num_envs_per_env_runner=4), []) is None
    assert block_refusal(_config(), [RLlibCallback()]) is None
    assert block_refusal(_config(learner_class=COMALearner), []) is None
    refusals = {
        "an evaluation runner": (_config(in_evaluation=True), []),
        "(Learner) reads episodes": (_config(learner_class=Learner), []),
        "3 worlds per runner do not split evenly over 2 data-parallel learners": (
            _config(num_learners=2, num_envs_per_env_runner=3),
            [],
        ),
        "on_sample_end callback reads the episodes: ['count_samples']": (
            _config(callbacks_on_sample_end=count_samples),
            [],
        ),
        "['count_samples']": (
            _config(callbacks_on_episode_end=[log_contract_breaches, count_samples]),
            [],
        ),
        "['EpisodeEndCallback.on_episode_end']": (_config(), [EpisodeEndCallback()]),
    }
    for reason, (config, callback_objects) in refusals.items():
        assert reason in block_refusal(config, callback_objects)
