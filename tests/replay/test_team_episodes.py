"""The team-episode store: alignment, padding, priorities, checkpoints (no Ray)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from marllib_ext.errors import ConfigError
from marllib_ext.replay.team_episodes import TeamEpisode, TeamEpisodeStore

N_AGENTS = 3


def make_episode(uid: int, length: int, terminated: bool = False, obs_dim: int = 4) -> TeamEpisode:
    """obs[t, i] = (uid, t, i, 0...), state[t] = (uid, t), action[t, i] = (uid + t + i) % 5,
    reward[t, i] = uid + t / 10 + i / 100: every value says where it came from."""
    steps = np.arange(length + 1)
    obs = np.zeros((length + 1, N_AGENTS, obs_dim), np.float32)
    for i in range(N_AGENTS):
        obs[:, i, 0], obs[:, i, 1], obs[:, i, 2] = uid, steps, i
    state = np.stack([np.full(length + 1, uid), steps], axis=1).astype(np.float32)
    actions = (uid + np.arange(length)[:, None] + np.arange(N_AGENTS)[None, :]) % 5
    rewards = (uid + np.arange(length)[:, None] / 10 + np.arange(N_AGENTS)[None, :] / 100).astype(
        np.float32
    )
    return TeamEpisode(obs, state, actions.astype(np.int64), rewards, terminated)


def test_sampled_transitions_pair_every_agent_at_one_env_step():
    store = TeamEpisodeStore(10, seed=0)
    for uid, length in ((1, 5), (2, 7), (3, 3)):
        store.add(make_episode(uid, length, terminated=uid == 3))
    batch = store.sample_transitions(200)
    for b in range(200):
        uid, t = batch.obs[b, 0, 0, 0], batch.obs[b, 0, 0, 1]
        length = {1: 5, 2: 7, 3: 3}[int(uid)]
        assert 0 <= t < length
        for i in range(N_AGENTS):
            assert tuple(batch.obs[b, 0, i, :3]) == (uid, t, i)
            assert tuple(batch.obs[b, 1, i, :3]) == (uid, t + 1, i)  # next observation
            assert batch.actions[b, 0, i] == (uid + t + i) % 5
            assert batch.rewards[b, 0, i] == pytest.approx(uid + t / 10 + i / 100)
        assert tuple(batch.state[b, 0]) == (uid, t) and tuple(batch.state[b, 1]) == (uid, t + 1)
        assert batch.terminated[b, 0] == float(uid == 3 and t == length - 1)
        assert batch.mask[b, 0] == 1.0


def test_whole_episodes_are_padded_to_the_longest_and_masked():
    store = TeamEpisodeStore(4, seed=0)
    store.add(make_episode(1, 2))
    store.add(make_episode(2, 5))  # longer than any stored before: arrays grow in time
    batch = store.sample_episodes(16)
    assert batch.obs.shape == (16, 6, N_AGENTS, 4) and batch.mask.shape == (16, 5)
    for b in range(16):
        uid = int(batch.obs[b, 0, 0, 0])
        length = {1: 2, 2: 5}[uid]
        assert batch.mask[b].tolist() == [1.0] * length + [0.0] * (5 - length)
        assert batch.obs[b, length, 0, 1] == length  # the final observation is kept
        assert np.all(batch.rewards[b, length:] == 0)


def test_ring_buffer_overwrites_the_oldest_episode():
    store = TeamEpisodeStore(2, seed=0)
    for uid in (1, 2, 3):
        store.add(make_episode(uid, 3))
    assert len(store) == 2 and store.num_transitions == 6
    uids = set(store.sample_transitions(100).obs[:, 0, 0, 0].tolist())
    assert uids == {2.0, 3.0}


def test_agents_or_observation_size_mismatch_is_refused():
    store = TeamEpisodeStore(2)
    store.add(make_episode(1, 3))
    with pytest.raises(ValueError, match="agents"):
        store.add(make_episode(2, 3, obs_dim=9))


def test_prioritized_sampling_follows_priorities_and_weights_correct_it():
    store = TeamEpisodeStore(4, prioritized=True, importance_beta=1.0, seed=0)
    store.add(make_episode(1, 2))
    store.arrays["priority"][0, :2] = [9.0, 1.0]  # step t = 0 nine times step 1
    big = store.sample_transitions(20_000)
    share = (big.starts == 0).mean()
    assert share == pytest.approx(0.9, abs=0.02)
    # importance weights (N P)^-1 / max: t = 0 has P = 0.9, t = 1 P = 0.1 -> 1/9 and 1
    assert big.weights[big.starts == 0][0] == pytest.approx(1 / 9, rel=1e-4)
    assert big.weights[big.starts == 1][0] == pytest.approx(1.0)


def test_priority_update_is_roers_ema_and_new_data_enters_at_max_priority():
    store = TeamEpisodeStore(4, prioritized=True, per_beta=0.5, seed=0)
    store.add(make_episode(1, 1))
    batch = store.sample_transitions(1)
    store.update_priorities(batch, np.array([[5.0]]))
    assert store.arrays["priority"][0, 0] == pytest.approx(0.5 * 1.0 + 0.5 * 5.0)
    store.add(make_episode(2, 1))
    assert store.arrays["priority"][1, 0] == pytest.approx(5.0)  # the largest seen


def test_sampling_spread_reads_the_weights_of_the_stored_steps_or_episodes():
    store = TeamEpisodeStore(8, prioritized=True, alpha=1.0, seed=0)
    store.add(make_episode(1, 2))
    store.add(make_episode(2, 1))  # 3 stored steps of 2 episodes; padding not counted
    assert store.sampling_spread()["total_variation"] == pytest.approx(0.0)
    store.arrays["priority"][0, :2] = [3.0, 1.0]
    store.arrays["priority"][1, 0] = 4.0
    # steps: q = (3, 1, 4) / 8 against 1/3 each; episodes: means (2, 4) -> q = (1/3, 2/3)
    q_steps = np.array([3.0, 1.0, 4.0]) / 8
    assert store.sampling_spread()["total_variation"] == pytest.approx(
        0.5 * np.abs(q_steps - 1 / 3).sum()
    )
    episodes = store.sampling_spread(whole_episodes=True)
    assert episodes["total_variation"] == pytest.approx(1 / 6)
    assert episodes["max_over_mean"] == pytest.approx(4.0 / 3.0)
    uniform = TeamEpisodeStore(8, seed=0)
    assert uniform.sampling_spread()["total_variation"] == 0.0  # empty
    uniform.add(make_episode(1, 2))
    assert uniform.sampling_spread(whole_episodes=True)["effective_fraction"] == 1.0


def test_uniform_store_ignores_priority_updates():
    store = TeamEpisodeStore(4, seed=0)
    store.add(make_episode(1, 2))
    batch = store.sample_transitions(3)
    store.update_priorities(batch, np.full((3, 1), 7.0))
    assert np.all(batch.weights == 1.0)
    assert np.all(store.arrays["priority"][0, :2] == 1.0)


def test_state_round_trip_restores_contents_and_sampling():
    store = TeamEpisodeStore(5, prioritized=True, seed=3)
    for uid in range(1, 4):
        store.add(make_episode(uid, uid + 1))
    copy = TeamEpisodeStore(5, prioritized=True)
    copy.set_state(store.get_state())
    a, b = store.sample_transitions(50), copy.sample_transitions(50)
    np.testing.assert_array_equal(a.obs, b.obs)
    assert len(copy) == 3 and copy.next_slot == store.next_slot
    with pytest.raises(ValueError, match="buffer_size"):
        TeamEpisodeStore(6).set_state(store.get_state())


def test_empty_store_cannot_be_sampled():
    with pytest.raises(ValueError, match="empty"):
        TeamEpisodeStore(3).sample_transitions(1)


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc (Linux)")
def test_resident_memory_follows_the_episodes_written_not_the_capacity():
    store = TeamEpisodeStore(1000)
    episode = make_episode(0, 100, obs_dim=600)  # 0.7 MiB per stored episode
    full = store.bytes_at_capacity(episode)
    assert full > 600 * 2**20
    before = resident_bytes()
    for uid in range(20):
        store.add(make_episode(uid, 100, obs_dim=600))
    grown = resident_bytes() - before
    assert grown < 100 * 2**20  # 20 episodes (~14 MiB) and the test's own arrays
    sampled = store.sample_episodes(8)  # every draw from a written slot
    assert sampled.slots.max() < 20
    one = sum(a[:1].nbytes for a in store.arrays.values())
    assert full == 1000 * one


FILL_TO_CAPACITY = """
import resource
import numpy as np
from marllib_ext.replay.team_episodes import TeamEpisode, TeamEpisodeStore

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

obs = np.ones((101, 3, 600), np.float32)
episode = TeamEpisode(obs, np.ones((101, 2), np.float32), np.zeros((100, 3), np.int64),
                      np.ones((100, 3), np.float32), False)
store = TeamEpisodeStore(600)
before = peak()
for _ in range(600):
    store.add(episode)
print(store.bytes_at_capacity(episode), peak() - before)
"""


def test_filling_the_store_to_capacity_copies_nothing():
    """Peak resident memory while filling a 600-episode store (0.4 GiB) stays near the
    store's own size: a store that grew by copying into larger arrays held both."""
    done = subprocess.run(
        [sys.executable, "-c", FILL_TO_CAPACITY], capture_output=True, text=True, check=True
    )
    full, peak_growth = map(int, done.stdout.split())
    assert full > 400 * 2**20
    assert peak_growth < 1.15 * full


def test_a_longer_episode_keeps_every_written_slot():
    store = TeamEpisodeStore(50)
    for uid in range(1, 6):
        store.add(make_episode(uid, 4))
    store.add(make_episode(9, 7))  # longer: the arrays grow in time
    assert store.max_length == 7
    for slot, uid in enumerate((1, 2, 3, 4, 5)):
        np.testing.assert_array_equal(store.arrays["obs"][slot, :5], make_episode(uid, 4).obs)
        assert not store.arrays["obs"][slot, 5:].any()
    np.testing.assert_array_equal(store.arrays["obs"][5, :8], make_episode(9, 7).obs)
    state = store.get_state()
    assert len(state["arrays"]["obs"]) == 6  # a checkpoint holds the written slots only
    copy = TeamEpisodeStore(50)
    copy.set_state(state)
    np.testing.assert_array_equal(copy.arrays["obs"], store.arrays["obs"])


def test_a_store_larger_than_memory_is_refused_with_the_bytes_and_the_setting():
    store = TeamEpisodeStore(2 * 10**8)  # of episodes of some hundred bytes: tens of GB
    with pytest.raises(ConfigError, match=r"buffer_size=200000000: .* GiB .*lower buffer_size"):
        store.add(make_episode(0, 5))
