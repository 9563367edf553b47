"""JaxMARL's envs through one adapter (``jaxmarl:<env>[:<layout>]``, extra smax):
PettingZoo's contract, the batched world against JaxMARL's own env, time limits,
Overcooked's reward shaping and evaluation without it, names that are refused."""

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

pytest.importorskip("jaxmarl", reason="the smax extra is not installed")

import jax  # noqa: E402

from marllib_ext import algos, make_env  # noqa: E402
from marllib_ext.algos.restore import evaluation_env_config  # noqa: E402
from marllib_ext.envs.batched import BatchedVectorEnv  # noqa: E402
from marllib_ext.envs.by_name import spec_by_name  # noqa: E402
from marllib_ext.envs.jaxmarl_calls import world_key  # noqa: E402
from marllib_ext.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::UserWarning", "ignore::FutureWarning"
)

SERVED = [
    "jaxmarl:overcooked:cramped_room",
    "jaxmarl:overcooked_v2:cramped_room",
    "jaxmarl:coin_game",
    "jaxmarl:switch_riddle",
]


@pytest.mark.parametrize("name", SERVED)
def test_each_family_passes_the_parallel_api_test(name):
    env = make_env(name, **({"max_steps": 40} if "overcooked" in name else {})).spec.make()
    parallel_api_test(env, num_cycles=60)


def test_overcooked_observations_are_the_flattened_grids_of_jaxmarls_env():
    """One world replays JaxMARL's env stepped alone with the same keys: flattened
    observations, rewards plus the weighted shaped reward, the end at the time limit."""
    import jaxmarl
    from jaxmarl.environments.overcooked import overcooked_layouts

    steps = 400
    world = spec_by_name("jaxmarl:overcooked:cramped_room").make_batched(
        2, max_steps=steps, shaped_reward=0.5, shaped_reward_horizon=None
    )
    env = jaxmarl.make("overcooked", layout=overcooked_layouts["cramped_room"], max_steps=steps)
    step = jax.jit(env.step_env)
    arrays = world.reset_arrays(seed=3)
    key = jax.random.PRNGKey(3)
    obs, state = env.reset(world_key(key, 1, 0, 0))  # world 1, episode 0, its reset
    assert arrays.observations["agent_0"].shape == (2, 4 * 5 * 26)
    np.testing.assert_array_equal(arrays.observations["agent_1"][1], np.ravel(obs["agent_1"]))
    rng = np.random.default_rng(0)
    shaped_seen = 0.0
    for t in range(1, steps + 1):
        actions = {a: rng.integers(0, 6, 2) for a in world.agents}
        arrays = world.step_arrays(actions)
        obs, state, rewards, dones, info = step(
            world_key(key, 1, 0, t), state, {a: int(actions[a][1]) for a in world.agents}
        )
        for a in world.agents:
            np.testing.assert_array_equal(arrays.observations[a][1], np.ravel(obs[a]))
            expected = float(rewards[a]) + 0.5 * float(info["shaped_reward"][a])
            assert arrays.rewards[a][1] == pytest.approx(expected)
            shaped_seen += float(info["shaped_reward"][a])
        assert bool(arrays.truncated[1]) == (t == steps) and not arrays.terminated[1]
    assert bool(dones["__all__"])
    assert shaped_seen > 0  # random cooks place an onion or pick up a dish


def test_the_shaping_weight_anneals_to_zero_over_its_horizon():
    world = spec_by_name("jaxmarl:overcooked:cramped_room").make_batched(
        4, shaped_reward=2.0, shaped_reward_horizon=40
    )
    world.reset_arrays(seed=0)
    weights = []
    for _ in range(12):
        weights.append(world.shaping_coefficient())
        world.step_arrays({a: np.zeros(4, np.int64) for a in world.agents})
    # 4 worlds: 4 env steps per call, 2.0 * (1 - steps / 40), never below 0.
    np.testing.assert_allclose(weights, [2.0 * max(0.0, 1 - 4 * k / 40) for k in range(12)])


def test_resetting_some_worlds_keeps_the_others():
    world = spec_by_name("jaxmarl:coin_game").make_batched(3)
    world.reset_arrays(seed=1)
    for _ in range(3):
        before = world.step_arrays({a: np.ones(3, np.int64) for a in world.agents})
    fresh = world.reset_worlds([1])
    kept = world._current
    for a in world.agents:
        np.testing.assert_array_equal(kept.observations[a][0], before.observations[a][0])
        np.testing.assert_array_equal(kept.observations[a][1], fresh.observations[a][1])


def test_switch_riddle_ends_are_terminal_and_coin_game_is_cut_by_time():
    riddle = spec_by_name("jaxmarl:switch_riddle").make_batched(8)
    riddle.reset_arrays(seed=0)
    ends = 0
    for _ in range(20):
        arrays = riddle.step_arrays({a: np.full(8, 2) for a in riddle.agents})
        assert not arrays.truncated.any()
        ends += int(arrays.terminated.sum())
        riddle.reset_worlds(np.flatnonzero(arrays.terminated))
    assert ends > 0
    coins = spec_by_name("jaxmarl:coin_game").make_batched(2, num_inner_steps=3, num_outer_steps=2)
    coins.reset_arrays(seed=0)
    for t in range(1, 7):
        arrays = coins.step_arrays({a: np.zeros(2, np.int64) for a in coins.agents})
        assert list(arrays.truncated) == [t == 6] * 2 and not arrays.terminated.any()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("jaxmarl:storm", "not served: STORM"),
        ("jaxmarl:jaxnav", "continuous velocities"),
        ("jaxmarl:overcooked:kitchen", "unknown layout 'kitchen'"),
        ("jaxmarl:coin_game:big", "takes no layout"),
        ("jaxmarl:chess", "unknown JaxMARL env 'chess'"),
    ],
)
def test_names_the_adapter_cannot_serve_are_one_clear_error(name, message):
    with pytest.raises(ConfigError, match=message):
        spec_by_name(name)


def test_shaping_on_an_env_without_it_is_refused():
    with pytest.raises(ConfigError, match="shaped_reward"):
        spec_by_name("jaxmarl:coin_game").make_batched(2, shaped_reward=1.0)


def test_smax_is_served_under_both_names():
    spec = spec_by_name("jaxmarl:smax:3m")
    assert spec.name == "jaxmarl:smax:3m"
    assert spec.hyperparam_source == spec_by_name("smax:3m").hyperparam_source == "smax"
    world = spec.make_batched(2)
    assert world.provides_state and world.provides_action_masks
    assert world.reset_arrays(seed=0).state.shape[0] == 2


def test_mappo_samples_blocks_and_evaluates_without_shaping(ray_session):
    env = make_env("jaxmarl:overcooked:cramped_room", max_steps=20)
    config = algos.mappo(
        train_batch_size=160, minibatch_size=80, num_epochs=1, evaluation_interval=1,
        evaluation_duration=1,
    ).rllib_config(env, seed=0, num_env_runners=0, num_envs_per_env_runner=4)  # fmt: skip
    assert evaluation_env_config(config)["shaped_reward"] == 0.0
    assert config.evaluation_config["env_config"]["shaped_reward"] == 0.0
    algorithm = config.build_algo()
    try:
        runner = algorithm.env_runner
        assert isinstance(runner.env, BatchedVectorEnv) and runner.env.world.num_envs == 4
        assert runner.array_rollout is not None, runner.sampling
        result = algorithm.train()
        assert result["training_iteration"] == 1
    finally:
        algorithm.stop()


@pytest.mark.parametrize("name", SERVED[:2])
def test_overcooked_renders_through_jaxmarls_visualisers(name):
    world = spec_by_name(name).make_batched(2, render_mode="rgb_array")
    world.reset_arrays(seed=0)
    frame = world.slots[1].render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    assert frame.std() > 0  # a drawn kitchen, not a blank image
    assert spec_by_name("jaxmarl:coin_game").make_batched(1).slots[0].render() is None


def test_overcooked_hands_out_grids_a_cnn_actor_trains_on(ray_session):
    from torch import nn

    from marllib_ext.envs.grid_space import grid_shape_of

    env = make_env("jaxmarl:overcooked:cramped_room", max_steps=20)
    assert grid_shape_of(env.layout.observation_spaces["agent_0"]) == (4, 5, 26)
    config = algos.ippo(
        encoder="cnn", train_batch_size=160, minibatch_size=80, num_epochs=1
    ).rllib_config(env, seed=0, num_env_runners=0, num_envs_per_env_runner=4)
    algorithm = config.build_algo()
    try:
        module = next(iter(algorithm.env_runner.module.values()))
        assert any(isinstance(m, nn.Conv2d) for m in module.modules())
        assert algorithm.train()["training_iteration"] == 1
    finally:
        algorithm.stop()
    # mappo: the joint critic's CNN reads both cooks' grids stacked.
    config = algos.mappo(
        encoder="cnn", train_batch_size=160, minibatch_size=80, num_epochs=1
    ).rllib_config(env, seed=0, num_env_runners=0, num_envs_per_env_runner=4)
    critic = config.rl_module_spec.rl_module_specs["joint_critic"]
    assert critic.model_config["grid_stack"] == [2, 4, 5, 26]
    algorithm = config.build_algo()
    try:
        assert algorithm.train()["training_iteration"] == 1
    finally:
        algorithm.stop()
    # vdppo: each value head of the VD critic a CNN on its cook's own grid.
    config = algos.vdppo(
        encoder="cnn", train_batch_size=160, minibatch_size=80, num_epochs=1
    ).rllib_config(env, seed=0, num_env_runners=0, num_envs_per_env_runner=4)
    critic = config.rl_module_spec.rl_module_specs["joint_critic"]
    assert critic.model_config["agent_grids"] == [[4, 5, 26]] * 2
    algorithm = config.build_algo()
    try:
        assert algorithm.train()["training_iteration"] == 1
    finally:
        algorithm.stop()
    with pytest.raises(ConfigError, match="feed-forward heads"):
        algos.vdppo(encoder="cnn", critic_use_rnn=True).rllib_config(env, seed=0)
    with pytest.raises(ConfigError, match="encoder=cnn|encoder: cnn"):
        algos.efx_mappo(encoder="cnn").rllib_config(env, seed=0)


def test_recurrent_cnn_actors_train_on_overcooked(ray_session):
    """``mappo --set encoder=cnn use_rnn=true``: each cook's actor is conv layers, then
    a GRU, then the heads, trained on sequences from the rollout blocks."""
    from torch import nn

    env = make_env("jaxmarl:overcooked:cramped_room", max_steps=20)
    config = algos.mappo(
        encoder="cnn", use_rnn=True, rnn_hidden_dim=16, max_seq_len=5,
        conv_filters=[[8, 3, 1]], train_batch_size=160, minibatch_size=80, num_epochs=1,
    ).rllib_config(env, seed=0, num_env_runners=0, num_envs_per_env_runner=4)  # fmt: skip
    algorithm = config.build_algo()
    try:
        module = next(iter(algorithm.env_runner.module.values()))
        assert module.is_stateful()
        assert any(isinstance(m, nn.Conv2d) for m in module.modules())
        assert any(isinstance(m, nn.GRU) for m in module.modules())
        result = algorithm.train()
        assert result["training_iteration"] == 1
        assert result["num_env_steps_sampled_lifetime"] >= 160
    finally:
        algorithm.stop()


@pytest.mark.parametrize("runners", [0, 2])
def test_joint_q_gru_agents_train_on_overcooked_grids_through_a_cnn(ray_session, runners):
    """On the local runner and on two remote ones (their CNN weights synced from the
    learner each iteration)."""
    from torch import nn

    from marllib_ext.rllib_compat.learners import local_learner

    env = make_env("jaxmarl:overcooked:cramped_room", max_steps=20)
    config = algos.qmix(
        encoder="cnn", conv_filters=[[8, 3, 1]], use_rnn=True, batch_episode=2
    ).rllib_config(env, seed=0, num_env_runners=runners, num_envs_per_env_runner=2)
    algorithm = config.build_algo()
    try:
        modules = local_learner(algorithm).module.values()  # the agents and the mixer
        assert any(isinstance(m, nn.Conv2d) for module in modules for m in module.modules())
        for _ in range(2):
            result = algorithm.train()
        assert result["training_iteration"] == 2
        assert result["num_env_steps_sampled_lifetime"] >= 40
    finally:
        algorithm.stop()
