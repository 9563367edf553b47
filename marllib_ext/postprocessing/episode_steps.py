"""Where each agent's rows sit among a ``MultiAgentEpisode`` chunk's env steps.

RLlib's ``env_t_to_agent_t[agent]`` lists, per env index ``0..T`` of a chunk (``T`` env
steps; index ``T`` is the observation after the last one), the agent's global step
observed there or a skip tag. An agent acts at every index where it observes except
its last one in the chunk (its observation at the chunk's end, or its final one after
it terminated). These helpers read that map, so they work for agents that are absent
at some steps (dead, not yet arrived, waiting for their turn) and ignore the
artificial step RLlib's learner connector appends to the agents' episodes.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from marllib_ext.envs.adapter import STEP_REWARDS_KEY, TEAM_COST_KEY


def chunk_env_steps(chunk) -> int:
    """Env steps ``T`` of a ``MultiAgentEpisode`` chunk."""
    return int(chunk.env_t - chunk.env_t_started)


def observed_steps(chunk, agent_id: str) -> list[tuple[int, int]]:
    """``(env index, agent row)`` of every observation of ``agent_id`` in the chunk, in
    order; the agent row indexes its ``SingleAgentEpisode`` in the chunk."""
    if agent_id not in chunk.env_t_to_agent_t or agent_id not in chunk.agent_episodes:
        return []
    started = chunk.agent_episodes[agent_id].t_started
    return [
        (index, int(step) - started)
        for index, step in enumerate(env_index_map(chunk, agent_id))
        if step != chunk.SKIP_ENV_TS_TAG
    ]


def env_index_map(chunk, agent_id: str) -> list:
    """Per env index ``0..T`` of the chunk, the agent's global step observed there or
    RLlib's skip tag.

    Read from the end of RLlib's map: every env step appends one entry for every agent
    the episode knows (a skip tag where it did not observe), so the last ``T + 1``
    entries are the chunk's indices. The map's start is not reliable (ray 2.60): an
    agent first observed inside a chunk cut from an earlier one gets its map padded
    with the absolute env step's count of skip tags under the chunk's lookback, which
    places its rows ``env_t_started - lookback`` indices late (one early when the cut
    is at the reset)."""
    data = list(chunk.env_t_to_agent_t[agent_id].data)
    length = chunk_env_steps(chunk) + 1
    return [chunk.SKIP_ENV_TS_TAG] * (length - len(data)) + data[-length:]


def acting_steps(chunk, agent_id: str) -> list[tuple[int, int]]:
    """``(env index, agent row)`` of every step where ``agent_id`` acted in the chunk."""
    return observed_steps(chunk, agent_id)[:-1]


def chunk_step_infos(chunk, agents: Iterable[str] | None = None) -> list[dict | None]:
    """Per env index ``0..T``, the info returned with the observations there, from the
    first agent (sorted; of ``agents`` when given) that observed there; ``None`` where
    none did."""
    infos: list[dict | None] = [None] * (chunk_env_steps(chunk) + 1)
    chosen = sorted(chunk.agent_episodes if agents is None else set(agents))
    for agent_id in chosen:
        observed = observed_steps(chunk, agent_id)
        if not observed:
            continue
        agent_infos = chunk.agent_episodes[agent_id].get_infos()
        for index, row in observed:
            if infos[index] is None:
                infos[index] = agent_infos[row]
    return infos


def per_env_step(chunk, agent_values: dict[str, np.ndarray]) -> np.ndarray:
    """``(T,)`` per env step, the sum over agents of ``agent_values[agent][row]``, each
    agent's acting rows placed on their env steps."""
    total = np.zeros(chunk_env_steps(chunk), dtype=np.float64)
    for agent_id, values in agent_values.items():
        for index, row in acting_steps(chunk, agent_id):
            total[index] += float(values[row])
    return total


def env_step_team_rewards(
    chunk_infos: list[list[dict]], agents: list[str], chunk_lengths: np.ndarray
) -> np.ndarray | None:
    """``(n_rows,)`` per team row, the rewards of ``agents`` at that env step (from the
    ``step_rewards`` the adapter puts in the next observation's info; 0 on bootstrap
    rows); ``None`` when an info lacks them (an env not built through the adapter)."""
    rows = []
    for infos, length in zip(chunk_infos, chunk_lengths, strict=True):
        for info in infos[1:length]:
            step = info.get(STEP_REWARDS_KEY)
            if step is None:
                return None
            rows.append(sum(float(step.get(agent, 0.0)) for agent in agents))
        rows.append(0.0)  # the bootstrap row
    return np.asarray(rows, dtype=np.float64)


def agent_env_offsets(chunk, sa_episode, real_rows: int) -> np.ndarray:
    """``(real_rows,)`` the chunk env-step offset of each of the agent's real rows (the
    env step where it observed and acted; ``episode_steps.acting_steps``)."""
    acting = acting_steps(chunk, sa_episode.agent_id)
    if [row for _, row in acting] != list(range(real_rows)):
        raise RuntimeError(
            f"agent {sa_episode.agent_id!r} of chunk {chunk.id_!r} has {real_rows} rows but "
            f"acted at agent steps {[row for _, row in acting]} of its env steps"
        )
    return np.array([index for index, _ in acting], dtype=np.int64)


def team_chunk_infos(chunk, agents: Iterable[str]) -> list[dict]:
    """Per env index of the chunk, the info of a team agent that observed there; where
    none did (another team's turn), another agent's info without the team-specific
    cost (the state is the same in every agent's info). Every env step must have one."""
    infos = chunk_step_infos(chunk, agents)
    if any(info is None for info in infos):
        others = chunk_step_infos(chunk)
        infos = [
            info
            if info is not None
            else (None if other is None else {k: v for k, v in other.items() if k != TEAM_COST_KEY})
            for info, other in zip(infos, others, strict=True)
        ]
    missing = [index for index, info in enumerate(infos) if info is None]
    if missing:
        raise RuntimeError(
            f"no agent observed env steps {missing} of chunk {chunk.id_!r}; turn-taking "
            "envs sample complete episodes (EnvSpec.turn_based)"
        )
    return infos
