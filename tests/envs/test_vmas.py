"""The vmas:<task> family (extra vmas): one VMAS simulator of N worlds per env runner,
the same numbers as raw VMAS, BenchMARL's presets and named errors."""

import numpy as np
import pytest

from marllib_ext import make_env
from marllib_ext.envs.handle import RllibEnvCreator
from marllib_ext.envs.vmas import VMAS_TASKS, VmasWorld
from marllib_ext.errors import ConfigError

vmas = pytest.importorskip("vmas", reason="the vmas extra is not installed")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _raw(task, num_envs, seed):
    args = dict(VMAS_TASKS[task])
    max_steps = args.pop("max_steps")
    return vmas.make_env(
        task, num_envs=num_envs, device="cpu", continuous_actions=True, max_steps=max_steps,
        seed=seed, dict_spaces=True, clamp_actions=True, terminated_truncated=True, **args,
    )  # fmt: skip


def test_the_vector_env_is_one_vmas_world_with_raw_vmas_numbers():
    num_envs = 4
    vector = RllibEnvCreator(make_env("vmas:navigation").spec).make_batched(num_envs, {})
    assert vector.world.env.num_envs == num_envs  # one simulator, not 4 of batch size 1
    raw = _raw("navigation", num_envs, seed=0)
    observations, _ = vector.reset(seed=3)
    raw.seed(3)
    raw_observations = raw.reset()
    rng = np.random.default_rng(0)
    for _ in range(5):
        for agent in raw.agents:
            expected = raw_observations[agent.name].numpy()
            got = np.stack([observations[i][agent.name] for i in range(num_envs)])
            np.testing.assert_allclose(got, expected, rtol=1e-6)
        actions = rng.uniform(-1, 1, (num_envs, len(raw.agents), 2)).astype(np.float32)
        observations, rewards, *_ = vector.step(
            [{a.name: actions[i, k] for k, a in enumerate(raw.agents)} for i in range(num_envs)]
        )
        raw_observations, raw_rewards, *_ = raw.step(
            {a.name: torch.from_numpy(actions[:, k]) for k, a in enumerate(raw.agents)}
        )
        for agent in raw.agents:
            got = [rewards[i][agent.name] for i in range(num_envs)]
            np.testing.assert_allclose(got, raw_rewards[agent.name].numpy(), rtol=1e-6)


def test_worlds_end_at_max_steps_truncated_and_come_back_reset():
    vector = RllibEnvCreator(make_env("vmas:balance", max_steps=3).spec).make_batched(
        2, {"max_steps": 3}
    )
    observations, infos = vector.reset(seed=0)
    assert infos[0]["agent_0"]["state"].shape == (4 * 16,)  # every agent's observation
    zero = {a: np.zeros(2, np.float32) for a in observations[0]}
    for _ in range(3):
        _, rewards, terminateds, truncateds, _ = vector.step([zero, zero])
    assert [t["__all__"] for t in truncateds] == [True, True]
    assert [t["__all__"] for t in terminateds] == [False, False]  # a time limit: bootstrap
    _, rewards, _, truncateds, _ = vector.step([{}, {}])
    assert rewards[0] == {a: 0.0 for a in observations[0]}
    assert [t["__all__"] for t in truncateds] == [False, False]


def test_a_slot_of_a_batch_does_not_step_alone():
    world = VmasWorld("navigation", 2, seed=0)
    world.reset(0)
    with pytest.raises(RuntimeError, match="steps only with the batch"):
        world.slots[1].step({a: np.zeros(2, np.float32) for a in world.agents})


@pytest.mark.parametrize("task", sorted(VMAS_TASKS))
def test_every_preset_builds_one_team_with_an_episode_limit(task):
    env = make_env(f"vmas:{task}")
    layout = env.layout
    assert list(layout.teams) == ["agent"]
    assert env.spec.episode_limit(env.env_args) == VMAS_TASKS[task]["max_steps"]
    rllib_env = env.make_rllib_env()
    observations, _ = rllib_env.reset(seed=0)
    assert set(observations) == set(layout.agents)


def test_discrete_actions():
    env = make_env("vmas:navigation", continuous_actions=False)
    rllib_env = env.make_rllib_env()
    assert rllib_env.action_space["agent_0"].n == 9
    observations, _ = rllib_env.reset(seed=0)
    _, rewards, *_ = rllib_env.step({a: 8 for a in observations})
    assert set(rewards) == set(observations)


def test_bad_tasks_and_arguments_are_named():
    with pytest.raises(ConfigError, match="unknown VMAS task 'navigatoin'"):
        make_env("vmas:navigatoin")
    with pytest.raises(ConfigError, match="n_agentz"):
        make_env("vmas:navigation", n_agentz=4).make_rllib_env()
