"""Index arithmetic between per-module batch rows and aligned team rows (numpy only).

RLlib stores one module's rows episode chunk by episode chunk, agent by agent, each
agent's rows being that agent's steps in the chunk plus one bootstrap row. A chunk of
``T`` env steps maps onto ``T + 1`` team rows, row ``i`` being env step
``chunk.env_t_started + i`` and the last one the bootstrap row. An agent's real row
sits at the env step where it observed and acted (``env_offsets``); agents absent at
some steps (dead, not yet arrived, waiting for their turn) leave those rows empty, and
every agent's own bootstrap row maps onto the chunk's bootstrap row.
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
    length: int  # real rows + 1 bootstrap row
    # (length - 1,) chunk env-step offset of each real row; None: one row per env step
    env_offsets: npt.NDArray[np.int64] | None = None
    # alive and observed at the chunk's last env step (its bootstrap state)
    observed_at_end: bool = True


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
        present: ``(n_rows, n_agents)`` True where the agent has a real row, and on
            bootstrap rows where it is alive and observed at the chunk's end.
    """

    team_row_of: dict[str, npt.NDArray[np.int64]]
    chunk_starts: npt.NDArray[np.int64]
    chunk_lengths: npt.NDArray[np.int64]
    chunk_agents: list[list[str]]
    chunk_ids: list[Hashable]
    agent_ids: list[str]
    agent_index_of: dict[str, npt.NDArray[np.int64]]
    present: npt.NDArray[np.bool_]

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

    def chunk_of_rows(self) -> npt.NDArray[np.int64]:
        """``(n_rows,)`` the chunk index of every team row."""
        return np.repeat(np.arange(len(self.chunk_ids)), self.chunk_lengths)

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
    """Agents of one episode chunk cannot be placed on its env steps."""


def build_team_layout(
    agent_rows: Sequence[AgentRows], chunk_env_steps: dict[Hashable, int] | None = None
) -> TeamLayout:
    """Builds the layout from agent rows listed in RLlib's batch order.

    ``chunk_env_steps``: env steps of each chunk (its team rows are one more). Without
    it, every agent of a chunk must act at every env step (rows without
    ``env_offsets``, one row count per chunk).

    Raises:
        MisalignedAgentsError: agents without ``env_offsets`` with different row counts
            in one chunk, or an offset outside the chunk.
    """
    chunks: dict[Hashable, list[AgentRows]] = {}
    for rows in agent_rows:
        chunks.setdefault(rows.chunk_id, []).append(rows)

    chunk_ids = list(chunks)
    chunk_lengths = np.zeros(len(chunk_ids), dtype=np.int64)
    chunk_agents: list[list[str]] = []
    for index, chunk_id in enumerate(chunk_ids):
        lengths = {rows.agent_id: rows.length for rows in chunks[chunk_id]}
        if chunk_env_steps is not None and chunk_id in chunk_env_steps:
            chunk_lengths[index] = int(chunk_env_steps[chunk_id]) + 1
        elif len(set(lengths.values())) != 1:
            raise MisalignedAgentsError(
                f"episode chunk {chunk_id!r} has agents with different step counts "
                f"{lengths} and no env-step offsets to place them"
            )
        else:
            chunk_lengths[index] = next(iter(lengths.values()))
        chunk_agents.append(sorted(lengths))
    chunk_starts = np.concatenate([[0], np.cumsum(chunk_lengths)[:-1]]).astype(np.int64)
    chunk_index = {chunk_id: i for i, chunk_id in enumerate(chunk_ids)}

    agent_ids = sorted({rows.agent_id for rows in agent_rows})
    agent_index = {agent_id: index for index, agent_id in enumerate(agent_ids)}
    present = np.zeros((int(chunk_lengths.sum()), len(agent_ids)), dtype=bool)
    pieces: dict[str, list[np.ndarray]] = {}
    agent_pieces: dict[str, list[np.ndarray]] = {}
    for rows in agent_rows:
        chunk = chunk_index[rows.chunk_id]
        start, team_rows = int(chunk_starts[chunk]), int(chunk_lengths[chunk])
        offsets = (
            np.arange(rows.length - 1, dtype=np.int64)
            if rows.env_offsets is None
            else np.asarray(rows.env_offsets, dtype=np.int64)
        )
        if len(offsets) != rows.length - 1 or (
            len(offsets) and (offsets.min() < 0 or offsets.max() >= team_rows - 1)
        ):
            raise MisalignedAgentsError(
                f"agent {rows.agent_id!r} of chunk {rows.chunk_id!r}: {rows.length - 1} real "
                f"rows at env-step offsets {offsets.tolist()} do not fit {team_rows - 1} steps"
            )
        real = start + offsets
        present[real, agent_index[rows.agent_id]] = True
        present[start + team_rows - 1, agent_index[rows.agent_id]] = rows.observed_at_end
        pieces.setdefault(rows.module_id, []).append(
            np.append(real, start + team_rows - 1)  # its bootstrap row: the chunk's
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
        present=present,
    )
