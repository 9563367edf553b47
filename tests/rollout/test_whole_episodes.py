"""Whole episodes without RLlib's bias toward short ones: on a turn-taking game the
chunks cut at every env step join back into the episode sampled uncut, and an env
runner with several envs returns long and short episodes in their true proportion
(RLlib's own ``complete_episodes`` sampling does not)."""

import numpy as np
import pytest
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from marllib_ext import algos
from marllib_ext.envs import register_env
from marllib_ext.envs.adapter import ParallelEnvAdapter
from marllib_ext.envs.toy_agents import TakeTurnsEnv
from marllib_ext.envs.turns import TurnBasedParallelEnv
from marllib_ext.rollout.episode_steps import acting_steps, chunk_step_infos
from marllib_ext.rollout.whole_episodes import WholeEpisodeEnvRunner, join_chunks

LONG, SHORT = 24, 1


def turn_transitions(players: int, rounds: int, seed: int):
    """``(reset observations, infos, [env step tuples])`` of one game, legal moves drawn
    from ``seed``."""
    env = ParallelEnvAdapter(TurnBasedParallelEnv(TakeTurnsEnv(players=players, rounds=rounds)))
    rng = np.random.default_rng(seed)
    observations, infos = env.reset(seed=seed)
    start, steps = (observations, infos), []
    while True:
        actions = {
            a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in observations.items()
        }
        observations, rewards, terminateds, truncateds, infos = env.step(actions)
        steps.append((observations, actions, rewards, infos, terminateds, truncateds))
        if terminateds["__all__"] or truncateds["__all__"]:
            return start, steps


def add_steps(episode, steps):
    for observations, actions, rewards, infos, terminateds, truncateds in steps:
        episode.add_env_step(
            observations, actions, rewards, infos, terminateds=terminateds, truncateds=truncateds
        )


def joined_from_chunks(observations, infos, steps, cuts):
    """The game recorded in chunks cut after each env step in ``cuts``, joined."""
    head = MultiAgentEpisode()
    head.add_env_reset(observations=observations, infos=infos)
    chunk, start = head, 0
    chunks = []
    for cut_at in [*cuts, len(steps)]:
        add_steps(chunk, steps[start:cut_at])
        chunks.append(chunk)
        if cut_at < len(steps):
            chunk = chunk.cut(len_lookback_buffer=1)
        start = cut_at
    for tail in chunks[1:]:
        join_chunks(head, tail)
    head.validate()
    return head


@pytest.mark.parametrize("players", [2, 3])
@pytest.mark.parametrize("layout", ["one cut", "every step"])
def test_turn_taking_chunks_join_into_the_uncut_episode(players, layout):
    (observations, infos), steps = turn_transitions(players, rounds=3, seed=players)
    whole = MultiAgentEpisode()
    whole.add_env_reset(observations=observations, infos=infos)
    add_steps(whole, steps)
    cut_layouts = (
        [[k] for k in range(1, len(steps))]
        if layout == "one cut"
        else [list(range(1, len(steps))), list(range(2, len(steps), 2))]
    )
    for cuts in cut_layouts:
        joined = joined_from_chunks(observations, infos, steps, cuts)
        assert joined.env_steps() == whole.env_steps() and joined.is_done
        assert chunk_step_infos(joined) == chunk_step_infos(whole), cuts
        for agent in whole.agent_ids:
            got, want = joined.agent_episodes[agent], whole.agent_episodes[agent]
            assert list(got.get_actions()) == list(want.get_actions()), (cuts, agent)
            assert list(got.get_rewards()) == list(want.get_rewards()), (cuts, agent)
            np.testing.assert_array_equal(
                [o["observation"] for o in got.get_observations()],
                [o["observation"] for o in want.get_observations()],
            )
            assert list(joined.env_t_to_agent_t[agent]) == list(whole.env_t_to_agent_t[agent])
            assert acting_steps(joined, agent) == acting_steps(whole, agent), (cuts, agent)


class RandomLengthTurns(TakeTurnsEnv):
    """Two players take turns for ``LONG`` or ``SHORT`` turns, drawn at reset."""

    def reset(self, seed=None, options=None):
        super().reset(seed=seed, options=options)
        self.turns = LONG if self._rng.random() < 0.5 else SHORT


def long_share(runner, calls: int) -> tuple[float, int]:
    lengths = [e.env_steps() for _ in range(calls) for e in runner.sample()]
    assert set(lengths) <= {LONG, SHORT}
    return float(np.mean(np.equal(lengths, LONG))), len(lengths)


def test_long_episodes_come_back_in_their_true_share(ray_session):
    register_env("random_length_turns", RandomLengthTurns, turn_based=True)
    config = algos.mappo(num_env_runners=0, num_envs_per_env_runner=8).rllib_config(
        "random_length_turns", seed=0
    )
    assert config.env_runner_cls is WholeEpisodeEnvRunner
    whole = config.build_algo()
    try:
        share, episodes = long_share(whole.env_runner, calls=40)
        metrics = whole.env_runner.get_metrics()
    finally:
        whole.stop()
    # RLlib's episode metrics add the chunks it returned: joining them must not grow
    # those chunks, or a long episode would be logged longer than it is.
    assert metrics["episode_len_max"] == LONG
    # Half the episodes are long; 1 - 3 standard errors of a fair draw is the floor.
    assert episodes >= 320 and share > 0.5 - 3 * np.sqrt(0.25 / episodes)
    rllib = config.copy(copy_frozen=False).env_runners(env_runner_cls=MultiAgentEnvRunner)
    rllib = rllib.build_algo()
    try:
        biased, rllib_episodes = long_share(rllib.env_runner, calls=40)
    finally:
        rllib.stop()
    # RLlib's drops the episodes still running when the first ones end: the long ones.
    assert biased < 0.5 - 3 * np.sqrt(0.25 / rllib_episodes)
