"""Envs users bring: any PettingZoo ParallelEnv by module path (``pz:``), ``--import``
of a module in the current directory, and a non-finite reward from any env."""

import csv
import math

import pytest
from pettingzoo.test import api_test, parallel_api_test

from marllib_ext import algos, make_env
from marllib_ext.cli import main
from marllib_ext.envs import register_env
from marllib_ext.envs.registry import get_env_spec
from marllib_ext.envs.toy import CoordinationEnv
from marllib_ext.errors import ConfigError, EnvError
from tests.helpers import BUILTIN_ENVS


@pytest.mark.parametrize("name", BUILTIN_ENVS)
def test_every_registered_env_passes_the_parallel_api_test(name):
    env = make_env(name).spec.make()
    if make_env(name).spec.turn_based:  # AEC under the turn-taking facade
        api_test(env.aec_env, num_cycles=30)
    else:
        parallel_api_test(env, num_cycles=30)


@pytest.mark.parametrize("name", BUILTIN_ENVS)
def test_rllib_builds_and_samples_every_registered_env(ray_session, name):
    env = make_env(name)
    share = "all" if env.spec.policy_mapping.all_agents_one_policy else "group"
    config = algos.ippo(num_env_runners=0, num_envs_per_env_runner=1).rllib_config(
        env, share_policy=share, seed=0
    )
    algorithm = config.build_algo()
    try:
        # RLlib's random actions ignore masks; an untrained masked policy plays legally.
        episodes = algorithm.env_runner.sample(
            num_timesteps=60, random_actions=not env.layout.has_action_masks
        )
    finally:
        algorithm.stop()
    assert sum(len(e) for e in episodes) >= 60


def test_pz_env_by_module_path_infers_groups_teams_and_episode_length():
    env = make_env("pz:mpe2.simple_tag_v3")
    info = env.spec.policy_mapping
    assert info.team_prefix == ("adversary_", "agent_")
    assert not info.all_agents_one_policy  # adversaries and good agents observe differently
    assert env.spec.episode_limit() == 25  # the env's max_cycles
    assert env.spec.episode_limit({"max_cycles": 40}) == 40
    assert set(env.layout.teams) == {"adversary", "agent"}
    config = algos.mappo().rllib_config(env, share_policy="group")
    assert {"joint_critic_adversary", "joint_critic_agent"} <= set(config.policies)
    assert make_env("pz:mpe2.simple_spread_v3").spec.policy_mapping.all_agents_one_policy


@pytest.mark.parametrize(
    "name,share_policy,message",
    [
        ("pz:no_such_package.envs", "all", "cannot import module 'no_such_package.envs'"),
        ("pz:json", "all", "module 'json' has no parallel_env"),
        ("pz:mpe2.simple_tag_v3", "all", "share_policy='all' is not allowed for env"),
    ],
)
def test_bad_pz_envs_fail_with_one_line_naming_env_and_cause(capsys, name, share_policy, message):
    with pytest.raises(ConfigError, match=message):
        algos.mappo().rllib_config(name, share_policy=share_policy)
    code = main(["train", "mappo", "--env", name, "--share-policy", share_policy])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("marllib-ext: error:")
    assert name.removeprefix("pz:") in err[0] or name in err[0]


def test_import_finds_a_module_in_the_current_directory(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_cwd_envs.py").write_text(
        "from marllib_ext.envs import register_env\n"
        "from marllib_ext.envs.toy import CoordinationEnv\n"
        "register_env('user:from_cwd', CoordinationEnv, max_episode_steps=25)\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["--import", "my_cwd_envs", "list"]) == 0
    assert "user:from_cwd" in capsys.readouterr().out
    assert main(["--import", "not_a_module_here", "list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "marllib-ext: error: --import not_a_module_here: No module named 'not_a_module_here'"
    ]


class NaNRewardEnv(CoordinationEnv):
    """Agent ``agent_1`` gets a NaN reward at env step 3 of every episode after the
    env's first 500 steps (so a first iteration runs clean)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.t, self.life = 0, 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        obs, rewards, terms, truncs, infos = super().step(actions)
        if self.life >= 500 and self.t == 3:
            rewards = {**rewards, "agent_1": math.nan}
        self.t, self.life = self.t + 1, self.life + 1
        return obs, rewards, terms, truncs, infos


register_env("test:nan_reward", NaNRewardEnv, max_episode_steps=25)


@pytest.mark.parametrize("num_env_runners", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_nan_reward_names_env_agent_and_step_and_keeps_the_run(
    ray_session, tmp_path, num_env_runners
):
    algo = algos.mappo(
        hyperparam_source="toy",
        num_env_runners=num_env_runners,
        num_envs_per_env_runner=1,
        train_batch_size=400,
        minibatch_size=200,
        num_epochs=1,
    )
    with pytest.raises(EnvError) as raised:
        algo.fit(
            "test:nan_reward",
            stop={"training_iteration": 6},
            local_dir=tmp_path,
            checkpoint_freq=1,
        )
    message = str(raised.value)
    assert "env 'test:nan_reward': agent 'agent_1'" in message and "env step 3" in message
    (run_dir,) = tmp_path.iterdir()
    assert f"run directory kept: {run_dir}" in message
    with open(run_dir / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and (run_dir / "checkpoint_000001").exists()


TUPLE_AGENT_ENVS = [
    ("lbforaging", "lbf:Foraging-8x8-2p-2f-coop-v3", 50),
    ("rware", "rware:rware-tiny-2ag-v2", 500),
]


@pytest.mark.parametrize("package,name,limit", TUPLE_AGENT_ENVS)
def test_lbf_and_rware_are_parallel_envs_rllib_can_sample(ray_session, package, name, limit):
    pytest.importorskip(package, reason=f"the {name.split(':')[0]} extra is not installed")
    env = make_env(name)
    assert env.spec.episode_limit() == limit
    assert env.layout.agents == ("agent_0", "agent_1")
    parallel_api_test(env.spec.make(), num_cycles=30)
    config = algos.mappo(num_env_runners=0, num_envs_per_env_runner=1).rllib_config(env)
    algorithm = config.build_algo()
    try:
        # RLlib's random actions ignore masks; an untrained masked policy plays legally.
        episodes = algorithm.env_runner.sample(
            num_timesteps=60, random_actions=not env.layout.has_action_masks
        )
    finally:
        algorithm.stop()
    assert sum(len(e) for e in episodes) >= 60


def run_to_the_end(env, steps: int) -> tuple[dict, dict, int]:
    env.reset(seed=0)
    for step in range(1, steps + 1):
        actions = dict.fromkeys(env.agents, 0)  # NONE: nobody loads or delivers
        _, _, terminated, truncated, _ = env.step(actions)
        if not env.agents:
            return terminated, truncated, step
    raise AssertionError(f"no episode end within {steps} steps")


@pytest.mark.parametrize("package,name,limit", TUPLE_AGENT_ENVS)
def test_the_envs_own_step_limit_is_a_truncation(package, name, limit):
    """LBF and RWARE report their step limit as ``terminated``; the adapter calls it
    ``truncated`` so the value bootstraps there."""
    pytest.importorskip(package, reason=f"the {name.split(':')[0]} extra is not installed")
    env = make_env(name).spec.make()
    terminated, truncated, steps = run_to_the_end(env, limit + 1)
    assert steps == limit
    assert not any(terminated.values()) and all(truncated.values())


def test_an_lbf_episode_whose_food_is_gone_is_terminated():
    pytest.importorskip("lbforaging", reason="the lbf extra is not installed")
    env = make_env("lbf:Foraging-8x8-2p-2f-coop-v3").spec.make()
    env.reset(seed=0)
    env.env.unwrapped.field[:] = 0  # every food collected
    _, _, terminated, truncated, _ = env.step(dict.fromkeys(env.agents, 0))
    assert all(terminated.values()) and not any(truncated.values())


def test_unknown_lbf_id_is_one_clear_error():
    pytest.importorskip("lbforaging", reason="the lbf extra is not installed")
    with pytest.raises(ConfigError, match="env 'lbf:Nope-v0'"):
        get_env_spec("lbf:Nope-v0")


def test_mamujoco_halfcheetah_2x3_is_a_parallel_env_rllib_can_sample(ray_session):
    pytest.importorskip("gymnasium_robotics", reason="the mamujoco extra is not installed")
    env = make_env("mamujoco:HalfCheetah", agent_conf="2x3")
    assert env.layout.agents == ("agent_0", "agent_1")
    assert env.layout.state_space.shape == (17,)  # MaMuJoCo's state(), the full qpos/qvel
    assert env.spec.episode_limit() == 1000
    parallel_api_test(env.spec.make(agent_conf="2x3"), num_cycles=30)
    config = algos.mappo(num_env_runners=0, num_envs_per_env_runner=1).rllib_config(
        env, share_policy="individual"
    )
    algorithm = config.build_algo()
    try:
        # RLlib's random actions ignore masks; an untrained masked policy plays legally.
        episodes = algorithm.env_runner.sample(
            num_timesteps=60, random_actions=not env.layout.has_action_masks
        )
    finally:
        algorithm.stop()
    assert sum(len(e) for e in episodes) >= 60
    with pytest.raises(ConfigError, match="mamujoco:NoSuchRobot"):
        get_env_spec("mamujoco:NoSuchRobot")
