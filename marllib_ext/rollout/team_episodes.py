"""Whole team episodes for team replay (``replay.team_episodes.TeamEpisode``), sampled
by the package's env runner and handed to the algorithm ready to store.

``TeamEpisodeAssembler`` builds them from ``RolloutBlock`` s, the only input: the
batched rollout's blocks where the env and pipeline allow it (GRU agents included: the
rollout carries their states), RLlib's per-world episodes read as blocks
(``rollout.episode_blocks.blocks_of_chunks``) elsewhere.

A team episode's arrays, agents in the team's sorted order (``TeamEpisode``): row ``t``
is env step ``t`` for every agent; an agent's observation (and action mask) at the rows
it observed (acting, and the observation a turn passing to it, its death or the
episode's end handed it), zeros elsewhere and for agents absent from the whole episode;
its reward at every env step it was credited one (between its turns on turn-taking
envs); ``present`` where it acted (row ``T``: observed at a time-limit end, its
bootstrap); ``agent_terminated`` at its last acting step where it died or the episode
terminated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.utils.annotations import override

from marllib_ext.ops.rollout import episode_pieces
from marllib_ext.replay.team_episodes import TeamEpisode
from marllib_ext.rllib_compat import learner_value
from marllib_ext.rollout.blocks import RolloutBlock
from marllib_ext.rollout.episode_blocks import blocks_of_chunks
from marllib_ext.rollout.whole_episodes import WholeEpisodeEnvRunner

TEAM_LAYOUT_KEY = "team_replay_layout"  # learner_config_dict key of the agent/team layout


# ---- rollout blocks -> team episodes --------------------------------------------------------
def _padded(per_agent: dict[str, np.ndarray], positions: list[int], n: int, width: int):
    """``{agent: (T, B, d_i)}`` (the block's agents, in order) as ``(T, B, n, width)``:
    each at its team position, zero-padded; the team's other agents zeros."""
    first = next(iter(per_agent.values()))
    out = np.zeros((*first.shape[:2], n, width), np.float32)
    for index, values in zip(positions, per_agent.values(), strict=True):
        values = values.reshape(*first.shape[:2], -1)
        out[:, :, index, : values.shape[-1]] = values
    return out


def _on_team_axis(values: np.ndarray, positions: list[int], n: int) -> np.ndarray:
    """``(T, B, n_block, ...)`` of the block's agents as ``(T, B, n, ...)``, zeros for
    the team's agents the block does not hold."""
    out = np.zeros((*values.shape[:2], n, *values.shape[3:]), values.dtype)
    out[:, :, positions] = values
    return out


class TeamEpisodeAssembler:
    """Each world's running episode across ``RolloutBlock`` s; ``add`` returns the team
    episodes that ended in a block. A block may hold a subset of the team's agents (the
    others are absent throughout). A world whose episode starts at a block's first step
    drops what it held (the rollout restarted its worlds)."""

    def __init__(self, agents: tuple[str, ...], obs_dim: int) -> None:
        self.agents = tuple(agents)
        self.obs_dim = obs_dim
        self.pending: dict[int, list[dict[str, np.ndarray]]] = {}

    def reset(self) -> None:
        self.pending.clear()

    def add(self, block: RolloutBlock) -> list[TeamEpisode]:
        unknown = sorted(set(block.agents) - set(self.agents))
        if unknown:
            raise ValueError(f"block agents {unknown} are not in the team {self.agents}")
        positions = [self.agents.index(agent) for agent in block.agents]
        n, width = len(self.agents), self.obs_dim

        def team(values: np.ndarray) -> np.ndarray:
            return _on_team_axis(values, positions, n)

        rewards = np.where(block.reward_counted(), block.rewards, 0.0).astype(np.float32)
        columns = {
            "observations": _padded(block.observations, positions, n, width),
            "next_observations": _padded(block.next_observations, positions, n, width),
            "states": block.states,
            "next_states": block.next_states,
            "actions": team(np.stack([block.actions[a] for a in block.agents], axis=2)),
            "rewards": team(rewards),
            "alive": team(block.alive),
            "died": team(block.died),
            "next_present": team(block.present_after()),
            "observed_after": team(block.observed_after()),
        }
        if block.action_masks is not None:
            mask_width = next(iter(block.action_masks.values())).shape[-1]
            columns["masks"] = _padded(block.action_masks, positions, n, mask_width)
            columns["next_masks"] = _padded(block.next_action_masks, positions, n, mask_width)
        if block.starts is not None:
            for world in np.flatnonzero(block.starts[0]):
                self.pending.pop(int(world), None)
        episodes = []
        ended = block.terminated | block.truncated
        for world, start, stop, done in zip(*episode_pieces(ended), strict=True):
            piece = {name: values[start:stop, world] for name, values in columns.items()}
            self.pending.setdefault(int(world), []).append(piece)
            if done:
                pieces = self.pending.pop(int(world))
                episodes.append(_episode_of_pieces(pieces, bool(block.terminated[stop - 1, world])))
        return episodes


def _episode_of_pieces(pieces: list[dict[str, np.ndarray]], terminated: bool) -> TeamEpisode:
    """One world's steps of an episode (its pieces, in order) as a ``TeamEpisode``."""
    steps = {name: np.concatenate([piece[name] for piece in pieces]) for name in pieces[0]}
    alive, died, next_present = steps["alive"], steps["died"], steps["next_present"]
    length, n_agents = alive.shape
    # Where a step handed an agent an observation (``RolloutBlock.observed_after``).
    observed_after = steps["observed_after"]

    def observed(acted: np.ndarray, after: np.ndarray) -> np.ndarray:
        rows = np.zeros((length + 1, *acted.shape[1:]), np.float32)
        rows[1:][observed_after] = after[observed_after]
        rows[:length][alive] = acted[alive]
        return rows

    present = np.zeros((length + 1, n_agents), np.float32)
    present[:length] = alive
    present[length] = next_present[-1] & (not terminated)
    agent_terminated = (alive & died).astype(np.float32)
    if terminated:  # every agent that acted ends at its last acting step
        acted = alive.any(axis=0)
        last = length - 1 - np.argmax(alive[::-1], axis=0)
        agent_terminated[last[acted], np.flatnonzero(acted)] = 1.0
    actions = np.where(
        alive.reshape(*alive.shape, *[1] * (steps["actions"].ndim - 2)), steps["actions"], 0
    )
    return TeamEpisode(
        obs=observed(steps["observations"], steps["next_observations"]),
        state=np.concatenate([steps["states"], steps["next_states"][-1:]]).astype(np.float32),
        actions=actions,
        rewards=steps["rewards"],
        terminated=terminated,
        action_mask=(observed(steps["masks"], steps["next_masks"]) if "masks" in steps else None),
        present=present,
        agent_terminated=agent_terminated,
    )


def team_episodes_of_chunks(episodes: list, agents: tuple[str, ...], obs_dim: int):
    """RLlib's ended per-world ``MultiAgentEpisode`` s as ``TeamEpisode`` s, in order:
    each read as a one-world block (``blocks_of_chunks``) and assembled."""
    team_episodes: list[TeamEpisode] = []
    for episode in episodes:
        if episode.env_t_started != 0 or not episode.is_done:
            raise ValueError(
                f"episode {episode.id_!r} covers env steps {episode.env_t_started}.."
                f"{episode.env_t} and done={episode.is_done}; team replay stores whole "
                "episodes (batch_mode='complete_episodes')"
            )
        assembler = TeamEpisodeAssembler(agents, obs_dim)
        for block in blocks_of_chunks([episode]):
            team_episodes.extend(assembler.add(block))
    return team_episodes


# ---- the env runner -------------------------------------------------------------------------
class TeamEpisodeEnvRunner(WholeEpisodeEnvRunner):
    """A ``WholeEpisodeEnvRunner`` whose default ``sample()`` returns at least
    ``num_envs`` ended ``TeamEpisode`` s: from the batched rollout's arrays where the
    runner samples through it (``sampling: team episodes from arrays``), from RLlib's
    per-world episodes read as blocks elsewhere. Calls with ``num_timesteps`` or ``num_episodes``
    (evaluation) return RLlib episodes, as RLlib's runner does."""

    assembles_team_episodes = True  # read by rollout.sampler

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        layout = learner_value(self.config, TEAM_LAYOUT_KEY)
        self.team_agents: tuple[str, ...] = tuple(layout["agents"])
        self.team_obs_dim = max(layout["obs_dim_of"].values())
        self.assembler = TeamEpisodeAssembler(self.team_agents, self.team_obs_dim)

    def sampling_description(self) -> str:
        if self.array_rollout is None:
            return super().sampling_description()
        return "sampling: team episodes from arrays"

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
        if self.array_rollout is None:
            episodes = super().sample(
                explore=explore, random_actions=random_actions, force_reset=force_reset
            )
            return team_episodes_of_chunks(episodes, self.team_agents, self.team_obs_dim)
        if force_reset:
            self.assembler.reset()
        explore = self.config.explore if explore is None else explore
        ended: list[TeamEpisode] = []
        while len(ended) < self.num_envs:
            (block,) = self.array_rollout.sample(
                num_timesteps=self.next_sample_steps(),
                explore=explore,
                random_actions=random_actions,
                force_reset=force_reset,
                as_block=True,
            )
            force_reset = False
            for episode in self.assembler.add(block):
                ended.append(episode)
                self.count_ended(episode.length)
        return ended
