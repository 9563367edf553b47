"""Index arithmetic between per-module batch rows and aligned team rows (numpy only).

RLlib stores one module's rows episode chunk by episode chunk, agent by agent, each
agent's rows being that agent's steps in the chunk plus one bootstrap row. For
simultaneous-move envs every agent of a chunk has the same number of rows ``L``, so the
chunk maps onto ``L`` team rows, row ``i`` being env step ``chunk.env_t_started + i``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class AgentRows:
    """One agent's rows in one episode chunk, in RLlib's batch order."""

    chunk_id: Hashable
    agent_id: str
    module_id: str
    length: int


@dataclass(frozen=True)
class TeamLayout:
    """Where each module row lives in the ``[n_team_rows]`` team view.

    Attributes:
        team_row_of: module id -> ``(module_rows,)`` int index into team rows.
        chunk_starts: ``(n_chunks,)`` first team row of each chunk.
        chunk_lengths: ``(n_chunks,)`` rows per chunk, including the bootstrap row.
        chunk_agents: sorted agent ids per chunk.
        chunk_ids: the chunks' ids, in batch order.
        agent_ids: every agent id seen, sorted.
        agent_index_of: module id -> ``(module_rows,)`` index into ``agent_ids``.
    """

    team_row_of: dict[str, npt.NDArray[np.int64]]
    chunk_starts: npt.NDArray[np.int64]
    chunk_lengths: npt.NDArray[np.int64]
    chunk_agents: list[list[str]]
    chunk_ids: list[Hashable]
    agent_ids: list[str]
    agent_index_of: dict[str, npt.NDArray[np.int64]]

    @property
    def n_rows(self) -> int:
        return int(self.chunk_lengths.sum())

    @property
    def bootstrap_rows(self) -> npt.NDArray[np.int64]:
        """``(n_chunks,)`` the last (artificial, loss-masked) row of each chunk."""
        return self.chunk_starts + self.chunk_lengths - 1

    @property
    def last_real_rows(self) -> npt.NDArray[np.int64]:
        """``(n_chunks,)`` the last real step of each chunk."""
        return self.chunk_starts + self.chunk_lengths - 2

    def valid_mask(self) -> npt.NDArray[np.bool_]:
        """``(n_rows,)`` True on real steps, False on bootstrap rows."""
        mask = np.ones(self.n_rows, dtype=bool)
        mask[self.bootstrap_rows] = False
        return mask

    def scatter(self, team_values: np.ndarray, module_id: str) -> np.ndarray:
        """Team-row values broadcast onto ``module_id``'s rows (same value per agent)."""
        return team_values[self.team_row_of[module_id]]

    def gather_sum(self, module_values: dict[str, np.ndarray]) -> np.ndarray:
        """``(n_rows,)`` per-team-row sum over agents of per-module row values."""
        total = np.zeros(self.n_rows, dtype=np.float64)
        for module_id, values in module_values.items():
            np.add.at(total, self.team_row_of[module_id], values)
        return total


class MisalignedAgentsError(ValueError):
    """Agents of one episode chunk have different numbers of steps."""


def build_team_layout(agent_rows: Sequence[AgentRows]) -> TeamLayout:
    """Builds the layout from agent rows listed in RLlib's batch order.

    Raises:
        MisalignedAgentsError: if agents of one chunk have different row counts (an
            agent that acts only on some env steps cannot be aligned by env step).
    """
    chunks: dict[Hashable, list[AgentRows]] = {}
    for rows in agent_rows:
        chunks.setdefault(rows.chunk_id, []).append(rows)

    chunk_ids = list(chunks)
    chunk_lengths = np.zeros(len(chunk_ids), dtype=np.int64)
    chunk_agents: list[list[str]] = []
    for index, chunk_id in enumerate(chunk_ids):
        lengths = {rows.agent_id: rows.length for rows in chunks[chunk_id]}
        if len(set(lengths.values())) != 1:
            raise MisalignedAgentsError(
                f"episode chunk {chunk_id!r} has agents with different step counts "
                f"{lengths}; the joint critic needs every agent to act on every env step "
                "until the episode ends (keep finished agents in the env with a no-op)"
            )
        chunk_lengths[index] = next(iter(lengths.values()))
        chunk_agents.append(sorted(lengths))
    chunk_starts = np.concatenate([[0], np.cumsum(chunk_lengths)[:-1]]).astype(np.int64)
    start_of = dict(zip(chunk_ids, chunk_starts.tolist(), strict=True))

    agent_ids = sorted({rows.agent_id for rows in agent_rows})
    agent_index = {agent_id: index for index, agent_id in enumerate(agent_ids)}
    pieces: dict[str, list[np.ndarray]] = {}
    agent_pieces: dict[str, list[np.ndarray]] = {}
    for rows in agent_rows:
        start = start_of[rows.chunk_id]
        pieces.setdefault(rows.module_id, []).append(
            np.arange(start, start + rows.length, dtype=np.int64)
        )
        agent_pieces.setdefault(rows.module_id, []).append(
            np.full(rows.length, agent_index[rows.agent_id], dtype=np.int64)
        )
    return TeamLayout(
        team_row_of={mid: np.concatenate(parts) for mid, parts in pieces.items()},
        chunk_starts=chunk_starts,
        chunk_lengths=chunk_lengths,
        chunk_agents=chunk_agents,
        chunk_ids=chunk_ids,
        agent_ids=agent_ids,
        agent_index_of={mid: np.concatenate(parts) for mid, parts in agent_pieces.items()},
    )
