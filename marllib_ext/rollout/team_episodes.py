"""Whole team episodes for team replay (``replay.team_episodes.TeamEpisode``), sampled
by the package's env runner and handed to the algorithm ready to store.

``TeamEpisodeEnvRunner`` assembles them from the batched rollout's arrays
(``TeamEpisodeAssembler`` over ``RolloutBlock`` s) where the env and pipeline allow it,
GRU agents included (the rollout carries their states); elsewhere it samples RLlib's
per-world episodes and reads each one back (``team_episode``). Both give the same rows.

A team episode's arrays, agents in sorted order (``TeamEpisode``): row ``t`` is env step
``t`` for every agent; an agent's observation (and action mask) at the rows it observed
(acting, and the observation its death or the episode's end handed it), zeros
elsewhere; ``present`` where it acted (row ``T``: alive at a time-limit end);
``agent_terminated`` at its last step where it died or the episode terminated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.utils.annotations import override

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY, STATE_KEY, STEP_REWARDS_KEY
from marllib_ext.ops.rollout import episode_pieces
from marllib_ext.replay.team_episodes import TeamEpisode
from marllib_ext.rllib_compat import learner_value
from marllib_ext.rollout.blocks import RolloutBlock
from marllib_ext.rollout.whole_episodes import WholeEpisodeEnvRunner

TEAM_LAYOUT_KEY = "team_replay_layout"  # learner_config_dict key of the agent/team layout


# ---- RLlib's per-world episodes -> team episodes ------------------------------------------
def team_episode(episode, agents: tuple[str, ...], obs_dim: int) -> TeamEpisode:
    """A finished ``MultiAgentEpisode`` as a ``TeamEpisode`` (agents in ``agents``
    order, observations zero-padded to ``obs_dim``, the state from ``info["state"]``)."""
    if episode.env_t_started != 0:
        raise ValueError(
            f"episode {episode.id_!r} starts at env step {episode.env_t_started}; team "
            "replay stores whole episodes (batch_mode='complete_episodes')"
        )
    length = int(episode.env_t)
    n_agents = len(agents)
    obs = np.zeros((length + 1, n_agents, obs_dim), np.float32)
    rewards = np.zeros((length, n_agents), np.float32)
    present = np.zeros((length + 1, n_agents), bool)
    agent_terminated = np.zeros((length, n_agents), np.float32)
    actions, masks = None, None
    infos: list = [None] * (length + 1)
    for index, aid in enumerate(agents):
        agent_episode = episode.agent_episodes.get(aid)
        if agent_episode is None:
            continue  # never appeared
        agent_steps = episode.env_t_to_agent_t[aid].get(slice(0, length + 1))
        rows = np.array([e for e, k in enumerate(agent_steps) if k != episode.SKIP_ENV_TS_TAG])
        agent_obs = agent_episode.get_observations()
        if isinstance(agent_obs, dict):  # masked observations
            mask = np.asarray(agent_obs[ACTION_MASK_KEY], np.float32)
            if masks is None:
                masks = np.zeros((length + 1, n_agents, mask.shape[-1]), np.float32)
            masks[rows, index] = mask
            agent_obs = agent_obs[OBSERVATION_KEY]
        agent_obs = np.asarray(agent_obs, np.float32).reshape(len(rows), -1)
        obs[rows, index, : agent_obs.shape[1]] = agent_obs
        acted = rows[: len(agent_episode)]  # rows where it observed and then acted
        agent_actions = np.asarray(agent_episode.get_actions())
        if actions is None:
            actions = np.zeros((length, n_agents, *agent_actions.shape[1:]), agent_actions.dtype)
        actions[acted, index] = agent_actions
        rewards[acted, index] = np.asarray(agent_episode.get_rewards(), np.float32)
        present[acted, index] = True
        if agent_episode.is_terminated:
            agent_terminated[acted[-1], index] = 1.0
        elif rows[-1] == length:
            present[length, index] = True  # alive at the end: its bootstrap observation
    for aid in sorted(episode.agent_episodes):  # any agent's info carries the state
        agent_steps = episode.env_t_to_agent_t[aid].get(slice(0, length + 1))
        agent_infos = episode.agent_episodes[aid].get_infos()
        for row, step in enumerate(agent_steps):
            if step != episode.SKIP_ENV_TS_TAG and infos[row] is None:
                infos[row] = agent_infos[step]
    state = np.stack([np.asarray(info[STATE_KEY], np.float32).reshape(-1) for info in infos])
    if all(STEP_REWARDS_KEY in info for info in infos[1:]):
        # Each agent's reward of each env step, also where it was not observing (RLlib
        # credits those to its next row, a turn later on turn-taking envs).
        rewards = np.array(
            [[info[STEP_REWARDS_KEY].get(aid, 0.0) for aid in agents] for info in infos[1:]],
            np.float32,
        ).reshape(length, n_agents)
    return TeamEpisode(
        obs=obs,
        state=state,
        actions=actions,
        rewards=rewards,
        terminated=bool(episode.is_terminated),
        action_mask=masks,
        present=present.astype(np.float32),
        agent_terminated=agent_terminated,
    )


# ---- rollout blocks -> team episodes --------------------------------------------------------
def _padded(per_agent: dict[str, np.ndarray], agents, width: int) -> np.ndarray:
    """``{agent: (T, B, d_i)}`` as ``(T, B, n, width)``, zero-padded."""
    first = per_agent[agents[0]]
    out = np.zeros((*first.shape[:2], len(agents), width), np.float32)
    for index, agent in enumerate(agents):
        values = per_agent[agent].reshape(*first.shape[:2], -1)
        out[:, :, index, : values.shape[-1]] = values
    return out


class TeamEpisodeAssembler:
    """Each world's running episode across ``RolloutBlock`` s; ``add`` returns the team
    episodes that ended in a block. A world whose episode starts at a block's first step
    drops what it held (the rollout restarted its worlds)."""

    def __init__(self, agents: tuple[str, ...], obs_dim: int) -> None:
        self.agents = tuple(agents)
        self.obs_dim = obs_dim
        self.pending: dict[int, list[dict[str, np.ndarray]]] = {}

    def reset(self) -> None:
        self.pending.clear()

    def add(self, block: RolloutBlock) -> list[TeamEpisode]:
        if list(block.agents) != list(self.agents):
            raise ValueError(f"block agents {block.agents} are not the team's {self.agents}")
        agents, width = self.agents, self.obs_dim
        columns = {
            "observations": _padded(block.observations, agents, width),
            "next_observations": _padded(block.next_observations, agents, width),
            "states": block.states,
            "next_states": block.next_states,
            "actions": np.stack([block.actions[a] for a in agents], axis=2),
            "rewards": block.rewards.astype(np.float32),
            "alive": block.alive,
            "died": block.died,
        }
        if block.action_masks is not None:
            columns["masks"] = _padded(
                block.action_masks, agents, block.action_masks[agents[0]].shape[-1]
            )
            columns["next_masks"] = _padded(
                block.next_action_masks, agents, block.action_masks[agents[0]].shape[-1]
            )
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
                episodes.append(_team_episode(pieces, bool(block.terminated[stop - 1, world])))
        return episodes


def _team_episode(pieces: list[dict[str, np.ndarray]], terminated: bool) -> TeamEpisode:
    """One world's steps of an episode (its pieces, in order) as a ``TeamEpisode``."""
    steps = {name: np.concatenate([piece[name] for piece in pieces]) for name in pieces[0]}
    alive, died = steps["alive"], steps["died"]
    length, n_agents = alive.shape
    # Where an agent's step handed it its last observation: its death, the episode's end.
    last_seen = alive & died
    last_seen[-1] = alive[-1]

    def observed(acted: np.ndarray, after: np.ndarray) -> np.ndarray:
        rows = np.zeros((length + 1, *acted.shape[1:]), np.float32)
        rows[:length][alive] = acted[alive]
        rows[1:][last_seen] = after[last_seen]
        return rows

    present = np.zeros((length + 1, n_agents), np.float32)
    present[:length] = alive
    present[length] = alive[-1] & ~died[-1] & (not terminated)
    agent_terminated = (alive & died).astype(np.float32)
    if terminated:
        agent_terminated[-1] = np.maximum(agent_terminated[-1], alive[-1])
    actions = np.where(
        alive.reshape(*alive.shape, *[1] * (steps["actions"].ndim - 2)), steps["actions"], 0
    )
    return TeamEpisode(
        obs=observed(steps["observations"], steps["next_observations"]),
        state=np.concatenate([steps["states"], steps["next_states"][-1:]]).astype(np.float32),
        actions=actions,
        rewards=np.where(alive, steps["rewards"], 0.0).astype(np.float32),
        terminated=terminated,
        action_mask=(observed(steps["masks"], steps["next_masks"]) if "masks" in steps else None),
        present=present,
        agent_terminated=agent_terminated,
    )


# ---- the env runner -------------------------------------------------------------------------
class TeamEpisodeEnvRunner(WholeEpisodeEnvRunner):
    """A ``WholeEpisodeEnvRunner`` whose default ``sample()`` returns at least
    ``num_envs`` ended ``TeamEpisode`` s: from the batched rollout's arrays where the
    runner samples through it (``sampling: team episodes from arrays``), from RLlib's
    per-world episodes elsewhere. Calls with ``num_timesteps`` or ``num_episodes``
    (evaluation) return RLlib episodes, as RLlib's runner does."""

    assembles_team_episodes = True  # read by rollout.eligibility

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
            return [team_episode(e, self.team_agents, self.team_obs_dim) for e in episodes]
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
