"""A slow reference for team replay's episodes: a finished RLlib ``MultiAgentEpisode``
read agent by agent through RLlib's own episode API (``env_t_to_agent_t``, each
``SingleAgentEpisode``'s getters), with no rollout block in between."""

import numpy as np

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY, STATE_KEY, STEP_REWARDS_KEY
from marllib_ext.replay.team_episodes import TeamEpisode


def reference_team_episode(episode, agents: tuple[str, ...], obs_dim: int) -> TeamEpisode:
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
