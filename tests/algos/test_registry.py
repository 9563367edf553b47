"""Every registered algorithm's YAML loads, validates and builds an RLlib config."""

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from marllib_ext import algos
from marllib_ext.algos.policy_sharing import SHARED_POLICY_ID
from marllib_ext.configs import ALGO_CONFIG_DIR
from marllib_ext.configs.algo_files import known_sources
from marllib_ext.envs import make_env, register_env
from marllib_ext.envs.toy import CoordinationEnv
from marllib_ext.errors import ConfigError
from marllib_ext.policies import CRITIC_MODULE_ID, critic_module_id
from tests.helpers import BUILTIN_ENVS

MULTI_AGENT_ENVS = BUILTIN_ENVS


def test_every_algo_yaml_is_registered():
    files = {p.stem for p in ALGO_CONFIG_DIR.glob("*.yaml") if not p.stem.startswith("_")}
    assert files == set(algos.ALGORITHMS)


@pytest.mark.parametrize("name", sorted(algos.ALGORITHMS))
@pytest.mark.parametrize("source", ["common", "mpe", "toy"])
def test_every_yaml_source_gives_valid_settings(name, source):
    settings = algos.get(name).spec.settings(source)
    if algos.ALGORITHMS[name].capabilities.off_policy and hasattr(settings, "batch_episode"):
        assert settings.buffer_size >= settings.batch_episode  # team replay: in episodes
        return
    assert settings.train_batch_size >= (getattr(settings, "minibatch_size", 1) or 1)


@pytest.mark.parametrize("name", sorted(algos.ALGORITHMS))
@pytest.mark.parametrize("env_name", MULTI_AGENT_ENVS)
def test_builds_and_validates_rllib_config(name, env_name):
    env = make_env(env_name)
    share = "all" if env.spec.policy_mapping.all_agents_one_policy else "group"
    capabilities = algos.ALGORITHMS[name].capabilities
    if capabilities.single_agent_only:
        with pytest.raises(ConfigError, match="isac_roer"):
            algos.get(name).rllib_config(env, share_policy=share, seed=1)
        return
    if name == "isac_roer" and env.layout.has_action_masks:
        with pytest.raises(ConfigError, match="does not support action masks yet"):
            algos.get(name).rllib_config(env, share_policy=share, seed=1)
        return
    if algos.ALGORITHMS[name].capabilities.sequential:  # updates in turn need several policies
        share = "individual"
    overrides = {}
    boxes = [s for s in env.layout.action_spaces.values() if isinstance(s, gym.spaces.Box)]
    if not capabilities.continuous_actions and boxes:
        with pytest.raises(ConfigError, match="discrete actions only"):
            algos.get(name).rllib_config(env, share_policy=share, seed=1)
        return
    if not capabilities.discrete_actions and len(boxes) < len(env.layout.agents):
        with pytest.raises(ConfigError, match="continuous"):
            algos.get(name).rllib_config(env, share_policy=share, seed=1)
        return
    if not capabilities.turn_based and env.spec.turn_based:
        with pytest.raises(ConfigError, match="bootstraps each agent from the next env step"):
            algos.get(name).rllib_config(env, share_policy=share, seed=1)
        return
    if not capabilities.multi_team and len(env.layout.teams) > 1:
        with pytest.raises(ConfigError, match="supports one team"):
            algos.get(name).rllib_config(env, share_policy=share, seed=1)
        return
    if capabilities.has_budget and env.spec.reward_range is None:
        overrides = {"z_low": -10.0, "z_high": 0.0}
    config = algos.get(name, **overrides).rllib_config(env, share_policy=share, seed=1)
    assert isinstance(config, AlgorithmConfig)
    config.validate()
    if algos.ALGORITHMS[name].pipeline in ("CC", "VD") and not capabilities.off_policy:
        teams = env.layout.teams
        critics = [critic_module_id(t if len(teams) > 1 else None) for t in teams]
        assert CRITIC_MODULE_ID in critics or len(teams) > 1
        for critic in critics:
            assert critic in config.policies
            assert config.rl_module_spec.rl_module_specs[critic].learner_only


def test_ippo_runs_on_a_gymnasium_id():
    config = algos.ippo().rllib_config("CartPole-v1")
    assert not config.is_multi_agent


@pytest.mark.parametrize(
    "share_policy,expected",
    [
        ("all", {"agent_0": SHARED_POLICY_ID, "agent_1": SHARED_POLICY_ID}),
        ("group", {"agent_0": "agent", "agent_1": "agent"}),
        ("individual", {"agent_0": "agent_0", "agent_1": "agent_1"}),
    ],
)
def test_share_policy_modes(share_policy, expected):
    config = algos.mappo().rllib_config("toy:coordination", share_policy=share_policy)
    mapping = {a: config.policy_mapping_fn(a, None) for a in expected}
    assert mapping == expected
    assert set(config.policies) == set(expected.values()) | {CRITIC_MODULE_ID}


def test_group_mode_uses_team_prefixes():
    config = algos.ippo().rllib_config("mpe:simple_speaker_listener", share_policy="group")
    assert config.policy_mapping_fn("speaker_0", None) == "speaker"
    assert config.policy_mapping_fn("listener_0", None) == "listener"


def test_env_forbidding_all_is_an_error():
    with pytest.raises(ConfigError, match="share_policy='all' is not allowed"):
        algos.mappo().rllib_config("mpe:simple_speaker_listener", share_policy="all")


def test_env_forbidding_individual_is_an_error():
    register_env("user:no_individual", CoordinationEnv, one_agent_one_policy=False)
    with pytest.raises(ConfigError, match="share_policy='individual' is not allowed"):
        algos.ippo().rllib_config("user:no_individual", share_policy="individual")


def test_unknown_key_names_the_key():
    with pytest.raises(ConfigError, match=r"unknown config key 'lrr'.*did you mean 'lr'"):
        algos.mappo(lrr=0.1).rllib_config("toy:coordination")


def test_wrong_type_names_the_key():
    with pytest.raises(ConfigError, match="config key 'num_epochs' must be int"):
        algos.mappo(num_epochs=2.5).rllib_config("toy:coordination")
    with pytest.raises(ConfigError, match=r"config key 'actor_hiddens\[1\]' must be int"):
        algos.mappo(actor_hiddens=[64, "x"]).rllib_config("toy:coordination")


def test_out_of_range_value_names_the_key():
    with pytest.raises(ConfigError, match="'minibatch_size'"):
        algos.mappo(minibatch_size=10**9).rllib_config("toy:coordination")


def test_critic_key_is_rejected_for_ippo():
    with pytest.raises(ConfigError, match="unknown config key 'critic_hiddens'"):
        algos.ippo(critic_hiddens=[8]).rllib_config("toy:coordination")


def test_hyperparam_source_typo_is_an_error():
    assert "mpe" in known_sources("mappo")
    with pytest.raises(ConfigError, match="did you mean 'mpe'"):
        algos.mappo(hyperparam_source="mpee").rllib_config("mpe:simple_spread")


def test_source_overrides_common_and_user_overrides_source():
    common = algos.mappo(hyperparam_source="common").settings("toy:coordination")
    toy = algos.mappo().settings("toy:coordination")
    user = algos.mappo(lr=0.123).settings("toy:coordination")
    assert toy.train_batch_size != common.train_batch_size
    assert user.lr == 0.123 and user.train_batch_size == toy.train_batch_size


def test_mappo_rejects_single_agent_env():
    with pytest.raises(ConfigError, match="single-agent"):
        algos.mappo().rllib_config(make_env("CartPole-v1"))


def test_efx_reward_bounds_need_a_declared_reward_range():
    with pytest.raises(ConfigError, match="declares no reward_range, which z_bounds: reward"):
        algos.efx_mappo(z_bounds="reward").rllib_config("mpe:simple_reference")


def test_efx_reward_bounds_are_the_negated_return_range():
    from marllib_ext.algos.efx.budget_range import budget_bounds

    env = make_env("toy:coordination")  # team return in [0, 20]
    settings = algos.efx_mappo(z_bounds="reward").settings(env)
    assert budget_bounds(settings, env) == (-20.0, 0.0, -20.0)
    explicit = algos.efx_mappo(z_bounds="reward", z_low=-5.0).settings(env)
    assert budget_bounds(explicit, env) == (-5.0, 0.0, -5.0)


@pytest.mark.parametrize(
    "env_name,env_args,z_max",
    [
        # Z_max = c * T_max * sum_i H_max(i); Pass: 2 agents x 5 moves, 100 steps (9x9)
        ("grid:pass", {}, 100 * 2 * np.log(5)),
        ("grid:pass", {"size": 5, "max_steps": 125}, 125 * 2 * np.log(5)),
        # MPE: 3 agents x 5 discrete actions, 25 cycles
        ("mpe:simple_spread", {}, 25 * 3 * np.log(5)),
        ("mpe:simple_spread", {"N": 4, "max_cycles": 40}, 40 * 4 * np.log(5)),
        ("mpe:sparse_spread", {}, 25 * 3 * np.log(5)),
        # 2 agents, 1-d Gaussian actions at RLlib's initial unit std, 10 steps
        ("toy:continuous_target", {}, 10 * 2 * 1 * 0.5 * np.log(2 * np.pi * np.e)),
    ],
)
def test_efx_intrinsic_bound_equals_the_closed_form(env_name, env_args, z_max):
    from marllib_ext.algos.efx.budget_range import budget_bounds

    env = make_env(env_name, **env_args)
    settings = algos.efx_mappo().settings(env)
    z_low, z_high, z_init = budget_bounds(settings, env)
    assert (z_low, z_init) == (0.0, 0.0)
    assert z_high == pytest.approx(z_max)
    scaled = algos.efx_mappo(intrinsic_coef=0.1).settings(env)
    assert budget_bounds(scaled, env)[1] == pytest.approx(0.1 * z_max)


def test_efx_continuous_entropy_from_yaml():
    from marllib_ext.algos.efx.budget_range import budget_bounds

    env = make_env("toy:continuous_target")
    settings = algos.efx_mappo(gaussian_entropy_per_dim=0.5).settings(env)
    assert budget_bounds(settings, env)[1] == pytest.approx(10 * 2 * 0.5)


def test_efx_intrinsic_bounds_need_the_episode_limit():
    from tests.helpers import CounterEnv

    register_env("test:no_limit", CounterEnv, state_source="observations")
    with pytest.raises(ConfigError, match="declares no max_episode_steps"):
        algos.efx_mappo().rllib_config("test:no_limit")
    # explicit bounds need no limit
    algos.efx_mappo(z_low=0.0, z_high=5.0).rllib_config("test:no_limit")


def test_register_env_checks_the_episode_limit():
    from tests.helpers import CounterEnv

    with pytest.raises(ConfigError, match="max_episode_steps must be an int"):
        register_env("test:bad_limit", CounterEnv, max_episode_steps=0)
    with pytest.raises(ConfigError, match="'horizon', which is not set"):
        register_env("test:bad_limit", CounterEnv, max_episode_steps="horizon")
    spec = register_env(
        "test:arg_limit", CounterEnv, env_args={"horizon": 9}, max_episode_steps="horizon"
    )
    assert spec.episode_limit() == 9 and spec.episode_limit({"horizon": 4}) == 4


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("z_sampling", "gaussian", "z_sampling"),
        ("z_optimizer", "rmsprop", "z_optimizer"),
        ("intrinsic_coef", -1.0, "intrinsic_coef"),
        ("z_init", 500.0, "z_init"),
        ("z_bounds", "cost", "z_bounds"),
        ("efx_advantage", "max", "efx_advantage"),
        ("efx_kappa", 0.0, "efx_kappa"),
        ("z_deploy_fraction", 1.5, "z_deploy_fraction"),
        ("z_deploy_fraction", 0.0, "z_deploy_fraction"),
        ("gaussian_entropy_per_dim", -1.0, "gaussian_entropy_per_dim"),
    ],
)
def test_efx_bad_settings_name_the_key(key, value, message):
    with pytest.raises(ConfigError, match=message):
        algos.efx_mappo(**{key: value}).rllib_config("toy:coordination")


@pytest.mark.parametrize("name", algos.algorithms_that(multi_agent_only=True))
def test_multi_agent_only_algorithms_reject_a_gymnasium_env(name):
    with pytest.raises(ConfigError, match="single-agent env"):
        algos.get(name).rllib_config("CartPole-v1")


@pytest.mark.parametrize("name", algos.algorithms_that(has_budget=True))
def test_budget_algorithms_resolve_the_budget_before_it_travels(name):
    from marllib_ext.rllib_compat import settings_of

    share = "individual" if algos.ALGORITHMS[name].capabilities.sequential else "all"
    settings = settings_of(algos.get(name).rllib_config("toy:coordination", share_policy=share))
    assert settings.z_low == 0.0 < settings.z_high and settings.z_ext_scale > 0


def test_helpers_and_progress_columns_come_from_the_registry():
    from pathlib import Path

    from marllib_ext.algos.api import PROGRESS_FIELDS

    for name, spec in algos.ALGORITHMS.items():
        helper = getattr(algos, name)
        assert helper().name == name and spec.description in helper.__doc__
        assert {c.name for c in spec.progress_columns} <= set(PROGRESS_FIELDS)
        assert set(spec.progress({})) == {c.name for c in spec.progress_columns}
    package = Path(algos.__file__).resolve().parents[1]
    generic = [package / "algos" / "api.py", package / "sweeps.py", *(package / "cli").glob("*.py")]
    for path in generic:
        source = path.read_text()
        module = path.name
        for result_key in ('"efx"', '"safe"', '"budget_z"', '"cost_multiplier"'):
            assert result_key not in source, (module, result_key)


def test_unknown_capability_is_an_error():
    with pytest.raises(ConfigError, match="unknown capability 'flies'"):
        algos.algorithms_that(flies=True)
