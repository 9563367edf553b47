"""Team episodes of agents that arrive late and die early: built from a real RLlib
``MultiAgentEpisode``, stored, sampled, and the joint-Q targets on them."""

import numpy as np
import pytest
import torch
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from marllib_ext import algos
from marllib_ext.envs.adapter import ParallelEnvAdapter
from marllib_ext.envs.toy_agents import ComeAndGoEnv
from marllib_ext.replay.team_episodes import TeamEpisodeStore
from marllib_ext.rllib_compat import local_learner
from marllib_ext.rollout.team_episodes import team_episodes_of_chunks

AGENTS = ("agent_0", "agent_1", "agent_2")


def played_episode(**env_args):
    """toy:come_and_go played to its end with action 1 everywhere (reward 1 on odd t)."""
    env = ParallelEnvAdapter(ComeAndGoEnv(**env_args))
    observations, infos = env.reset(seed=0)
    episode = MultiAgentEpisode(
        observation_space=env.observation_space, action_space=env.action_space
    )
    episode.add_env_reset(observations=observations, infos=infos)
    terminateds = truncateds = {}
    while not episode.is_done:
        actions = {a: 1 for a in observations if not (terminateds.get(a) or truncateds.get(a))}
        observations, rewards, terminateds, truncateds, infos = env.step(actions)
        episode.add_env_step(
            observations, actions, rewards, infos, terminateds=terminateds, truncateds=truncateds
        )
    return episode.to_numpy()


def team_episode(episode, agents, obs_dim):
    (read,) = team_episodes_of_chunks([episode], agents, obs_dim)
    return read


def test_absent_steps_are_empty_and_deaths_are_the_agents_own():
    # 8 steps; agent_1 dies after acting at step 3; agent_2 arrives at step 2.
    episode = team_episode(played_episode(), AGENTS, obs_dim=5)
    assert episode.length == 8
    present = np.zeros((9, 3), np.float32)
    present[:8, 0] = 1
    present[:4, 1] = 1
    present[2:8, 2] = 1
    present[8, [0, 2]] = 1  # alive at the time limit: their bootstrap observations
    np.testing.assert_array_equal(episode.present, present)
    expected_terminated = np.zeros((8, 3), np.float32)
    expected_terminated[3, 1] = 1.0
    np.testing.assert_array_equal(episode.agent_terminated, expected_terminated)
    odd = (np.arange(8) % 2 == 1).astype(np.float32)
    np.testing.assert_array_equal(episode.rewards, odd[:, None] * present[:8])
    assert not episode.terminated
    # agent_2's first observation sits at step 2; agent_1's final one at step 4.
    np.testing.assert_allclose(episode.obs[2, 2], [2 / 8, 0, 0, 0, 1])
    np.testing.assert_allclose(episode.obs[4, 1], [4 / 8, 0, 0, 1, 0])
    assert not episode.obs[5:, 1].any() and not episode.obs[:2, 2].any()
    # The state is the env's at every step, with its alive mask.
    np.testing.assert_array_equal(episode.state[3, 2:], [1, 1, 1])
    np.testing.assert_array_equal(episode.state[5, 2:], [1, 0, 1])


def test_every_agent_dead_ends_the_episode_terminated():
    episode = team_episode(played_episode(all_die_at=4), AGENTS, obs_dim=5)
    assert episode.length == 5 and episode.terminated
    np.testing.assert_array_equal(episode.agent_terminated[4], [1, 0, 1])  # 1 died at 3
    assert not episode.present[5].any()


def test_the_store_samples_presence_and_zeroes_it_past_the_end():
    store = TeamEpisodeStore(4, seed=0)
    store.add(team_episode(played_episode(all_die_at=4), AGENTS, obs_dim=5))
    store.add(team_episode(played_episode(), AGENTS, obs_dim=5))
    batch = store.sample_episodes(8)
    for b in range(8):
        length = int(batch.mask[b].sum())
        assert not batch.present[b, length + 1 :].any()
        assert batch.present[b, :length, 0].all()  # agent_0 acts throughout
    columns = batch.columns()
    assert columns["present"].shape == (8, 9, 3)
    assert columns["agent_terminated"].shape == (8, 8, 3)


@pytest.mark.parametrize("name", ["iql", "qmix"])
def test_joint_q_values_and_targets_leave_out_absent_agents(ray_session, name):
    """On replayed come-and-go episodes: absent agents have no value and no bootstrap,
    and IQL's target at agent_1's death step is its reward alone."""
    algo = algos.get(name, hyperparam_source="toy", learning_starts=2, batch_episode=2)
    algo = algo.rllib_config("toy:come_and_go", seed=0).build_algo()
    try:
        algo.train()
        learner = local_learner(algo)
        sampled = algo.store.sample_episodes(4)
        (team,) = learner.teams
        columns = {k: torch.as_tensor(v) for k, v in sampled.columns().items()}
        with torch.no_grad():
            view = learner.batch_view(columns)
            loss = learner.team_loss(module_id=team, agent_index=[0, 1, 2], view=view)
    finally:
        algo.stop()
    present = columns["present"]
    length = view.length
    assert (view.chosen[present[:, :length] == 0] == 0).all()
    assert (view.next_values[present[:, 1:] == 0] == 0).all()
    assert (present[:, 5:, 1] == 0).all()  # agent_1 died after step 3
    if name == "iql":
        targets = loss.terms["targets"]  # (B, L, n)
        death = columns["agent_terminated"][..., 1] == 1
        assert death.any()
        torch.testing.assert_close(targets[..., 1][death], view.rewards[..., 1][death])
        assert not loss.terms["mask"][..., 1][present[:, :length, 1] == 0].any()
