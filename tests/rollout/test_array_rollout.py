"""The batched rollout path (``rollout.ArrayRollout``) against RLlib's per-world path on
VMAS: the same seed and the same (deterministic) policy give the same episode chunks."""

import math

import numpy as np
import pytest
from ray.rllib.core.columns import Columns

from marllib_ext import algos, make_env
from marllib_ext.envs.adapter import STATE_KEY, STEP_REWARDS_KEY
from marllib_ext.rllib_compat import reset_before_next_sample

pytest.importorskip("vmas", reason="the vmas extra is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SMALL = {"train_batch_size": 400, "minibatch_size": 200, "num_epochs": 1}
WORLDS = 4


def _algorithm(name="mappo", **env_args):
    config = algos.get(name, hyperparam_source="vmas", **SMALL).rllib_config(
        make_env("vmas:navigation", max_steps=20, **env_args),
        seed=3,
        num_env_runners=0,
        num_envs_per_env_runner=WORLDS,
    )
    return config.build_algo()


def _chunks(episodes):
    """Each chunk's per-agent data, keyed by where it starts (env step, first obs)."""
    out = {}
    for episode in episodes:
        agents = sorted(episode.agent_episodes)
        first = episode.agent_episodes[agents[0]].get_observations(0)
        key = (episode.env_t_started, tuple(np.round(first, 5)))
        out[key] = {
            "episode": (
                len(episode),
                episode.env_t,
                round(float(episode.get_return()), 4),
                episode.is_terminated,
                episode.is_truncated,
                {a: list(episode.env_t_to_agent_t[a].get()) for a in agents},
                sorted(episode.get_infos(-1)),
            )
        }
        out[key] |= {
            agent: {
                "obs": np.asarray(sa.get_observations()),
                "actions": np.asarray(sa.get_actions()),
                "rewards": np.asarray(sa.get_rewards()),
                "logp": np.asarray(sa.get_extra_model_outputs(Columns.ACTION_LOGP)),
                "state": np.stack([info[STATE_KEY] for info in sa.get_infos()]),
                "step_rewards": [info[STEP_REWARDS_KEY] for info in sa.get_infos()][1:],
                "ends": (sa.is_terminated, sa.is_truncated),
            }
            for agent, sa in episode.agent_episodes.items()
        }
    return out


def _sample(runner, steps_per_world, batched):
    if not batched:  # RLlib's own path, as a runner that cannot take the batched one
        runner.array_rollout, runner.array_rollout_refusal = None, "test"
    reset_before_next_sample(runner)
    chunks = {}
    for _ in range(2):  # two calls: the second continues the first's episodes
        chunks.update(_chunks(runner.sample(num_timesteps=WORLDS * steps_per_world, explore=False)))
    return chunks


def test_same_chunks_as_rllibs_path(ray_session):
    algorithm = _algorithm()
    try:
        runner = algorithm.env_runner
        batched = _sample(runner, 25, batched=True)
        assert runner.array_rollout is not None
        per_world = _sample(runner, 25, batched=False)
    finally:
        algorithm.stop()
    # 50 steps of 20-step episodes: cut at 25 and ended at 20 and 40, in every world.
    assert len(batched) == len(per_world) == WORLDS * 4
    assert batched.keys() == per_world.keys()
    for key, agents in batched.items():
        assert agents.pop("episode") == per_world[key].pop("episode")
        for agent, data in agents.items():
            theirs = per_world[key][agent]
            for column in ("obs", "actions", "rewards", "logp", "state"):
                np.testing.assert_allclose(data[column], theirs[column], rtol=1e-5, atol=1e-6)
            assert data["step_rewards"] == pytest.approx(theirs["step_rewards"])
            assert data["ends"] == theirs["ends"]


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


def test_an_algorithm_with_its_own_connectors_samples_as_rllib_does(ray_session):
    algorithm = _algorithm("efx_mappo")
    try:
        algorithm.train()
        runner = algorithm.env_runner
        assert runner.array_rollout is None
        assert "env-to-module" in runner.array_rollout_refusal
    finally:
        algorithm.stop()
