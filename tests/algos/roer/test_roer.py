"""ROER on RLlib's SAC with RLlib's episode buffers (``fast_replay=false``): buffers
that follow the priorities, learners that compute them, and the registry entries. The
fast path is ``test_fast_replay.py``."""

import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from marllib_ext import algos, make_env
from marllib_ext.algos.roer import (
    ROERMultiAgentPrioritizedEpisodeReplayBuffer,
    ROERPrioritizedEpisodeReplayBuffer,
)
from marllib_ext.errors import ConfigError
from marllib_ext.rllib_compat import priority_trees

TINY = {
    "fast_replay": False,
    "hiddens": [32, 32],
    "train_batch_size": 32,
    "num_steps_sampled_before_learning_starts": 64,
}


def filled_buffer(per_beta):
    buffer = ROERPrioritizedEpisodeReplayBuffer(capacity=100, alpha=1.0, per_beta=per_beta)
    buffer.add(
        [
            SingleAgentEpisode(
                observations=[np.array([float(i)]) for i in range(11)],
                actions=[0] * 10,
                rewards=[0.0] * 10,
                len_lookback_buffer=0,
            )
        ]
    )
    return buffer


def sample_obs(buffer, n, seed=None):
    episodes = buffer.sample(num_items=n, n_step=1, gamma=0.99, beta=0.0, sample_episodes=True)
    return [int(e.get_observations(0)[0]) for e in episodes]


def test_priorities_written_to_the_buffer_change_which_samples_are_drawn():
    buffer = filled_buffer(per_beta=1.0)
    first = sample_obs(buffer, 10)
    boosted = first[0]
    buffer.update_priorities(np.array([50.0 if o == boosted else 0.01 for o in first]))
    counts = np.bincount(sample_obs(buffer, 2000), minlength=10)
    share = counts[boosted] / counts.sum()
    # Before: every one of the 10 steps equally likely (0.1). After: the boosted step
    # outweighs all others together.
    assert share > 0.6


def test_ema_blends_new_priorities_into_stored_ones():
    buffer = filled_buffer(per_beta=0.25)
    sample_obs(buffer, 1)
    tree, (index,), _ = priority_trees(buffer)
    before = tree[index]  # new items start at the max priority, 1.0
    buffer.update_priorities(np.array([5.0]))
    assert tree[index] == pytest.approx(0.75 * before + 0.25 * 5.0)


# The rules themselves are unit-tested (replay/prioritization, ops.roer); one full run
# per type beyond JS is the slow tier's.
@pytest.mark.parametrize(
    "per_type", ["JS", *(pytest.param(t, marks=pytest.mark.slow) for t in ("KL", "PER", "uniform"))]
)
def test_sac_roer_trains_on_pendulum_and_reports_roer_metrics(ray_session, per_type):
    config = algos.sac_roer(per_type=per_type, **TINY).rllib_config("Pendulum-v1", seed=0)
    algorithm = config.build_algo()
    try:
        results = [algorithm.train() for _ in range(2)]
        buffer = algorithm.local_replay_buffer
    finally:
        algorithm.stop()
    metrics = results[-1]["learners"]["default_policy"]
    assert {"value_loss", "td_error_mean", "norm", "v_mean"} <= set(metrics)
    if per_type in ("JS", "KL"):
        assert isinstance(buffer, ROERPrioritizedEpisodeReplayBuffer)
        assert metrics["priority_mean"] == pytest.approx(1.0, abs=1e-4)  # std_normalize
        low, high = (0.0, 1.0) if per_type == "JS" else (0.5, 50.0)
        assert low <= metrics["per_weight"] <= high
        assert metrics["norm"] >= (0.5 if per_type == "JS" else 1.0)
    else:
        assert not isinstance(buffer, ROERPrioritizedEpisodeReplayBuffer)


def test_isac_roer_runs_on_continuous_simple_spread(ray_session):
    env = make_env("mpe:simple_spread", continuous_actions=True)
    config = algos.isac_roer(per_type="JS", **TINY).rllib_config(env, seed=0)
    algorithm = config.build_algo()
    try:
        result = algorithm.train()
        result = algorithm.train()
        buffer = algorithm.local_replay_buffer
    finally:
        algorithm.stop()
    assert isinstance(buffer, ROERMultiAgentPrioritizedEpisodeReplayBuffer)
    assert "priority_mean" in result["learners"]["shared"]


def test_wrong_env_kinds_and_bad_keys_are_clear_errors():
    with pytest.raises(ConfigError, match="isac_roer"):
        algos.sac_roer().rllib_config("mpe:simple_spread")
    with pytest.raises(ConfigError, match="per_type"):
        algos.sac_roer(per_type="XYZ").settings("Pendulum-v1")
    with pytest.raises(ConfigError, match="js_min_weight"):
        algos.sac_roer(js_min_weight=3.0).settings("Pendulum-v1")
