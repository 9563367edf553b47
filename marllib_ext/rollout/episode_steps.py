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

from marllib_ext.envs.adapter import STATE_KEY
from marllib_ext.ops.exploration import distinct_rows


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


def episode_coverage(episode) -> int | None:
    """The number of distinct global states (``info["state"]``, rounded to 6 decimals)
    at the env indices of a finished multi-agent episode: an exploration measure no
    method optimizes. ``None`` where the env reports no state."""
    if not hasattr(episode, "agent_episodes"):
        return None
    states = [
        np.asarray(info[STATE_KEY], np.float64).reshape(-1)
        for info in chunk_step_infos(episode)
        if isinstance(info, dict) and STATE_KEY in info
    ]
    return distinct_rows(np.stack(states)) if states else None
