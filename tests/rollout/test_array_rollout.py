"""The batched rollout path (``rollout.ArrayRollout``) against RLlib's per-world path on
VMAS: the same seed and the same (deterministic) policy give the same episode chunks."""

import math

import numpy as np
import pytest
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns

from marllib_ext import algos, make_env
from marllib_ext.envs.adapter import STATE_KEY, STEP_REWARDS_KEY
from marllib_ext.rllib_compat import reset_before_next_sample

pytest.importorskip("vmas", reason="the vmas extra is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SMALL = {"train_batch_size": 400, "minibatch_size": 200, "num_epochs": 1}
WORLDS = 4
MASKED = [False]  # whether the env under test has action masks


def _algorithm(name="mappo", env="vmas:navigation", sampler="auto", **env_args):
    source = {"hyperparam_source": "vmas"} if env.startswith("vmas:") else {}
    length = {"max_cycles": 20} if env.startswith("mpe:") else {"max_steps": 20}
    config = algos.get(name, **source, **SMALL).rllib_config(
        make_env(env, **length, **env_args),
        seed=3,
        num_env_runners=0,
        num_envs_per_env_runner=WORLDS,
        sampler=sampler,
    )
    return config.build_algo()


def _plain(observations):
    """The observation part of a masked observation (or the observation)."""
    return observations["observation"] if isinstance(observations, dict) else observations


def _agent_data(sa):
    observations = sa.get_observations()
    return {
        "obs": np.asarray(_plain(observations)),
        "masks": np.asarray(observations["action_mask"] if MASKED[0] else np.zeros(0)),
        "actions": np.asarray(sa.get_actions()),
        "rewards": np.asarray(sa.get_rewards()),
        "logp": np.asarray(sa.get_extra_model_outputs(Columns.ACTION_LOGP)),
        "state": np.stack([info[STATE_KEY] for info in sa.get_infos()]),
        "step_rewards": [info[STEP_REWARDS_KEY] for info in sa.get_infos()][1:],
        "infos": [sorted(info) for info in sa.get_infos()],
        "ends": (sa.is_terminated, sa.is_truncated),
    }


def _join(head, tail):
    """An agent's data over two chunks (the tail's first step is the head's last)."""
    joined = {}
    for key, value in head.items():
        if key == "ends":
            joined[key] = tail[key]
        elif key in ("step_rewards",):
            joined[key] = value + tail[key]
        elif key in ("obs", "masks", "state", "infos"):
            joined[key] = (
                (value + tail[key][1:])
                if isinstance(value, list)
                else (np.concatenate([value, tail[key][1:]]) if len(value) else value)
            )
        else:
            joined[key] = np.concatenate([value, tail[key]])
    return joined


def _episodes(chunks):
    """The ended episodes, each joined from its chunks, keyed by its first observation."""
    by_id = {}
    for chunk in sorted(chunks, key=lambda c: c.env_t_started):
        entry = by_id.setdefault(chunk.id_, {"length": 0, "return": 0.0, "agents": {}})
        entry["length"] += len(chunk)
        entry["return"] += float(chunk.get_return())
        entry["ends"] = (chunk.is_terminated, chunk.is_truncated)
        entry["last_infos"] = sorted(chunk.get_infos(-1))
        for agent, sa in chunk.agent_episodes.items():
            data = _agent_data(sa)
            agents = entry["agents"]
            agents[agent] = _join(agents[agent], data) if agent in agents else data
    out = {}
    for entry in by_id.values():
        if not any(entry["ends"]):
            continue
        first = entry["agents"][min(entry["agents"])]["obs"][0]
        out[tuple(np.round(first, 5))] = entry
    return out


def _sample(runner, steps_per_world):
    reset_before_next_sample(runner)
    chunks = []
    for _ in range(2):  # two calls: the second continues the first's episodes
        chunks += runner.sample(num_timesteps=WORLDS * steps_per_world, explore=False)
    return _episodes(chunks)


def _assert_same_step_rewards(ours, theirs):
    """Per-step ``{agent: reward}`` dicts: the same agents at every step, the rewards
    within ``pytest.approx``'s default tolerance (rel 1e-6, abs 1e-12), which takes no
    nested data from pytest 9 on."""
    assert [sorted(step) for step in ours] == [sorted(step) for step in theirs]
    for ours_step, theirs_step in zip(ours, theirs, strict=True):
        assert ours_step == pytest.approx(theirs_step)


@pytest.mark.parametrize("env", ["vmas:navigation", "smax:3m", "mpe:simple_spread"])
def test_same_episodes_as_rllibs_path(ray_session, env):
    """On SMAX (masks, units that die, SMAX's state), on VMAS, and on copies of a plain
    PettingZoo env (MPE, its collision costs in the infos). RLlib's path spends
    a vector step on each reset, so the two cut their chunks at different steps; the
    ended episodes, joined from their chunks, must be the same."""
    if env.startswith("smax:"):
        pytest.importorskip("jaxmarl", reason="the smax extra is not installed")
    MASKED[0] = env.startswith("smax:")
    batched, per_world = {}, {}
    # Episode chunks from the arrays, as for a learner that reads episodes; RLlib's own
    # path, as a runner that cannot take the batched one.
    for sampler, episodes in (("episode_chunks", batched), ("per_world", per_world)):
        algorithm = _algorithm(env=env, sampler=sampler)
        try:
            runner = algorithm.env_runner
            assert (runner.array_rollout is None) == (sampler == "per_world")
            episodes.update(_sample(runner, 25))
        finally:
            algorithm.stop()
    both = batched.keys() & per_world.keys()
    if not MASKED[0]:  # 50 steps of 20-step episodes: two ended in every world
        assert len(batched) == len(per_world) == len(both) == WORLDS * 2
    assert len(both) >= WORLDS * 2 and len(both) >= len(batched) - WORLDS
    for key in both:
        ours, theirs = batched[key], per_world[key]
        assert ours["length"] == theirs["length"]
        assert ours["return"] == pytest.approx(theirs["return"], abs=1e-5)
        assert ours["ends"] == theirs["ends"] and ours["last_infos"] == theirs["last_infos"]
        assert ours["agents"].keys() == theirs["agents"].keys()
        for agent, data in ours["agents"].items():
            other = theirs["agents"][agent]
            for column in ("obs", "masks", "actions", "rewards", "logp", "state"):
                np.testing.assert_allclose(data[column], other[column], rtol=1e-5, atol=1e-6)
            _assert_same_step_rewards(data["step_rewards"], other["step_rewards"])
            assert data["infos"] == other["infos"] and data["ends"] == other["ends"]


def test_trains_and_reports_episodes(ray_session):
    algorithm = _algorithm()
    try:
        for _ in range(2):
            result = algorithm.train()
        assert algorithm.env_runner.array_rollout is not None
        runners = result["env_runners"]
        assert runners["num_env_steps_sampled"] == 400
        assert runners["episode_len_mean"] == 20
        assert math.isfinite(runners["episode_return_mean"])
        losses = [m["total_loss"] for m in result["learners"].values() if "total_loss" in m]
        assert losses and all(math.isfinite(loss) for loss in losses)
    finally:
        algorithm.stop()


class PassThrough(ConnectorV2):
    """An env-to-module connector without an array form."""

    def __call__(self, *, batch, **kwargs):
        return batch


def test_a_connector_without_an_array_form_samples_as_rllib_does(ray_session):
    config = algos.get("mappo", hyperparam_source="vmas", **SMALL).rllib_config(
        make_env("vmas:navigation", max_steps=20), seed=3, num_env_runners=0,
        num_envs_per_env_runner=WORLDS,
    )  # fmt: skip
    config.env_runners(env_to_module_connector=lambda env, spaces, device: [PassThrough()])
    algorithm = config.build_algo()
    try:
        result = algorithm.train()
        runner = algorithm.env_runner
        assert runner.array_rollout is None
        assert runner.sampling == (
            "sampling: RLlib's per-world episodes (env-to-module connectors without an "
            "array form: ['PassThrough'])"
        )
        assert result["env_runners"]["num_env_steps_sampled"] == 400
    finally:
        algorithm.stop()
