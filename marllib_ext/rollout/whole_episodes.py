"""Whole episodes without a bias toward short ones.

RLlib's ``batch_mode="complete_episodes"`` samples until as many episodes as there are
vectorized envs have ended, then resets every env and drops the episodes still
running. The long episodes are the ones still running, so with several envs per runner
the batch over-represents short episodes. On 2-player Hanabi (8 envs, a fresh policy)
it kept 245 of 431 sampled env steps, and the dropped episodes averaged 20 steps
against 2.5 for the kept ones: the short games are the ones ended by a misplay.

:class:`WholeEpisodeEnvRunner` keeps RLlib's vectorized stepping and its truncating
sampler, holds every unfinished episode chunk until its continuation arrives and
returns only ended episodes, joined by :func:`join_chunks`. Every
env step sampled reaches the learner (at the latest one ``sample()`` later), and an
episode's chance of being returned does not depend on its length.
"""

from __future__ import annotations

import copy
from typing import Any

from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer
from ray.rllib.utils.annotations import override

from marllib_ext.rllib_compat.episodes import concat_episode_chunk
from marllib_ext.rollout.env_runner import BatchedEnvRunner

COMPLETE_EPISODES = "complete_episodes"


def env_step_maps(chunk, agents) -> tuple[int, dict[str, list]]:
    """``(lookback, {agent: env-step -> agent-step entries})`` of a chunk for each of
    ``agents``, lookback entries first; an agent without a map in the chunk gets skip
    entries (it did not observe there)."""
    maps = chunk.env_t_to_agent_t
    lookback = max((buffer.lookback for buffer in maps.values()), default=0)
    width = lookback + chunk.env_t - chunk.env_t_started + 1
    skipped = [chunk.SKIP_ENV_TS_TAG] * width
    return lookback, {
        agent: list(maps[agent].data) if agent in maps else skipped for agent in agents
    }


def join_chunks(head, tail) -> None:
    """``head.concat_episode(tail)`` with every agent's ``env_t_to_agent_t`` rebuilt:
    ``head``'s entries, then ``tail``'s past its lookback and the shared boundary step.
    RLlib 2.60's concat drops the entries of an agent that a chunk holds no data for
    (on turn-taking envs, a player that did not move during a short chunk) and
    misplaces an agent first seen in ``tail``; the agent's rows would then be read at
    the wrong env steps."""
    agents = {
        *head.env_t_to_agent_t,
        *head.agent_episodes,
        *tail.env_t_to_agent_t,
        *tail.agent_episodes,
    }
    head_lookback, head_maps = env_step_maps(head, agents)
    tail_lookback, tail_maps = env_step_maps(tail, agents)
    concat_episode_chunk(head, tail)
    for agent in agents:
        entries = head_maps[agent] + tail_maps[agent][tail_lookback + 1 :]
        head.env_t_to_agent_t[agent] = InfiniteLookbackBuffer(data=entries, lookback=head_lookback)


class WholeEpisodeEnvRunner(BatchedEnvRunner):
    """An env runner (batched or not) whose default ``sample()`` in ``complete_episodes``
    mode returns at least ``num_envs`` ended episodes, as RLlib's does, without dropping
    any running episode: it samples ``num_envs x`` (the mean length of the episodes
    ended so far) env steps at a time and holds unfinished chunks for the next call.
    Calls with ``num_timesteps`` or ``num_episodes`` behave as RLlib's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unfinished: dict[str, Any] = {}  # episode id -> its chunks joined so far
        self.ended_episodes = 0
        self.ended_steps = 0
        # Chunks are joined as lists (RLlib's concat on numpy chunks loses track of
        # which agent observed where); ended episodes are converted once, if asked.
        self.numpy_episodes = self.episodes_to_numpy
        self.episodes_to_numpy = False

    def next_sample_steps(self) -> int:
        """Env steps of the next inner ``sample()`` call: every env the mean length of
        the episodes ended so far (one step each before any ended)."""
        mean_length = self.ended_steps / max(self.ended_episodes, 1)
        return self.num_envs * max(1, round(mean_length))

    def whole_episode_call(self, num_timesteps: int | None, num_episodes: int | None) -> bool:
        """A default ``sample()`` call in ``complete_episodes`` mode (the one this runner
        answers with whole episodes; calls with step or episode counts are RLlib's)."""
        return (
            num_timesteps is None
            and num_episodes is None
            and self.config.batch_mode == COMPLETE_EPISODES
        )

    def count_ended(self, length: int) -> None:
        self.ended_episodes += 1
        self.ended_steps += length

    @override(MultiAgentEnvRunner)
    def sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
        random_actions: bool = False,
        force_reset: bool = False,
    ):
        if not self.whole_episode_call(num_timesteps, num_episodes):
            return super().sample(
                num_timesteps=num_timesteps,
                num_episodes=num_episodes,
                explore=explore,
                random_actions=random_actions,
                force_reset=force_reset,
            )
        if force_reset:
            self.unfinished.clear()
        ended = []
        while len(ended) < self.num_envs:
            chunks = super().sample(
                num_timesteps=self.next_sample_steps(),
                explore=explore,
                random_actions=random_actions,
                force_reset=force_reset,
            )
            force_reset = False
            for chunk in chunks:
                episode = self.unfinished.pop(chunk.id_, None)
                if episode is None:
                    # RLlib keeps the unfinished chunks it returned and adds their
                    # returns and lengths to the episode's metrics when it ends: later
                    # chunks join a copy, or they would be counted twice.
                    episode = chunk if chunk.is_done else copy.deepcopy(chunk)
                else:
                    join_chunks(episode, chunk)
                if episode.is_done:
                    ended.append(episode)
                    self.count_ended(episode.env_steps())
                else:
                    self.unfinished[chunk.id_] = episode
        if self.numpy_episodes:
            ended = [episode.to_numpy() for episode in ended]
        return ended
