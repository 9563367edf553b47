"""The novelty signals of ``intrinsic_signals`` (``count`` and ``rnd``): each scores the
agents' next observations, the agent's own (``scope: agent``) or its team's joint one
(``team``), through ``novelty_inputs``, the rows the learner also trains RND on.

- ``CountSignal``: ``r_int = c / sqrt(n)``, ``n`` the visits to the observation's code
  (``ops.novelty``: exact rounded rows or SimHash). Counts are merged across env
  runners through RLlib's connector-state sync: each runner keeps its own visits
  since the run began under its own key, and the merged state holds every runner's
  latest table (the largest, since tables only grow), so a broadcast that arrives
  while a runner samples loses none of its visits. Checkpoints hold the tables.
- ``RNDSignal``: ``r_int = c * e / (e + e_ref)`` (``ops.novelty.rnd_bonus``), ``e`` the
  error of random network distillation's predictor (``policies.rnd``), which lives in
  the env runner's RLModule and is trained by the learner
  (``algos.ppo.rnd_training``).
"""

from __future__ import annotations

import uuid

import numpy as np

from marllib_ext.ops.novelty import (
    COUNT_HASHES,
    COUNT_SCOPES,
    count_bonus,
    rnd_bonus,
    rounded_row_codes,
    simhash_codes,
    simhash_projection,
    visit_counts,
)
from marllib_ext.policies.rnd import RND_MODULE_ID
from marllib_ext.postprocessing.budget_input import plain_observation


class NoveltySignal:
    """A novelty signal over the agents' next observations: each agent's own
    (``scope: agent``), or each team's joint one (``team``: the team's rows
    concatenated, zeros for teammates that did not act; each agent that acted gets an
    equal share of the team's bonus). A subclass gives the bonus of one input's rows
    (``input_bonus``)."""

    records_column = True

    def __init__(self, *, coef, agents, observation_dims, teams, scope) -> None:
        if scope not in COUNT_SCOPES:
            raise ValueError(f"scope must be one of {COUNT_SCOPES}, got {scope!r}")
        self.coef, self.agents, self.scope = coef, list(agents), scope
        self.dims = [int(observation_dims[agent]) for agent in self.agents]
        self.teams = [np.asarray(team, int) for team in teams]

    def input_bonus(self, kind: str, index: int, rows: np.ndarray) -> np.ndarray:
        """``(N,)`` the bonus of ``rows`` of agent ``index`` (``kind == "agent"``) or of
        team ``index``'s joint observation (``"team"``), counted now."""
        raise NotImplementedError

    def rewards(self, *, logp: np.ndarray, next_observations, acted: np.ndarray) -> np.ndarray:
        """``(B, n_agents)`` bonuses of the agents that acted (``next_observations``:
        ``{agent: (B, d)}`` plain observations after the step)."""
        out = np.zeros(acted.shape)
        rows = acted_rows(next_observations, acted, self.agents, self.dims)
        for kind, index, worlds, members, x in novelty_inputs(
            rows, acted, scope=self.scope, teams=self.teams
        ):
            bonus = self.input_bonus(kind, index, x)
            if kind == "agent":
                out[worlds, index] = bonus
            else:
                team_acted = acted[np.ix_(worlds, members)]
                share = team_acted / team_acted.sum(axis=1, keepdims=True)
                out[np.ix_(worlds, members)] = bonus[:, None] * share
        return out


def acted_rows(observations, acted: np.ndarray, agents: list[str], dims: list[int]) -> list:
    """Each agent's ``(B, d_i)`` plain observation rows as float64, zeros where it did not
    act (``observations``: ``{agent: (B, ...)}``, absent agents missing)."""
    num_envs = acted.shape[0]
    rows = []
    for i, (agent, dim) in enumerate(zip(agents, dims, strict=True)):
        observed = observations.get(agent)
        if observed is None:
            rows.append(np.zeros((num_envs, dim)))
            continue
        observed = np.asarray(plain_observation(observed), np.float64)
        rows.append(np.where(acted[:, [i]], observed.reshape(num_envs, dim), 0.0))
    return rows


def novelty_inputs(rows: list, acted: np.ndarray, *, scope: str, teams: list):
    """What a novelty signal scores, from ``rows`` (:func:`acted_rows`, ``(N, d_i)`` per
    agent) and ``acted`` ``(N, n_agents)``: ``(kind, index, worlds, members, x)`` per
    agent (``kind == "agent"``: its rows where it acted) or per team (``"team"``: the
    joint rows where any member acted), ``x`` ``(len(worlds), d)``. The env runners
    score these rows and the learner trains RND's predictor on the same ones."""
    if scope == "team":
        for k, team in enumerate(teams):
            team = np.asarray(team, int)
            worlds = np.flatnonzero(acted[:, team].any(axis=1))
            if len(worlds):
                x = np.concatenate([rows[i][worlds] for i in team], axis=1)
                yield "team", k, worlds, team, x
        return
    for i, agent_rows in enumerate(rows):
        worlds = np.flatnonzero(acted[:, i])
        if len(worlds):
            yield "agent", i, worlds, np.array([i]), agent_rows[worlds]


class CountSignal(NoveltySignal):
    """``r_int = c / sqrt(n(code(next observation)))``, see the module docstring."""

    def __init__(
        self,
        *,
        coef: float,
        agents: list[str],
        observation_dims: dict[str, int],
        teams: list[list[int]],
        scope: str,
        hash_kind: str,
        hash_bits: int,
        decimals: int,
        seed: int | None,
    ) -> None:
        if scope not in COUNT_SCOPES:
            raise ValueError(f"count_scope must be one of {COUNT_SCOPES}, got {scope!r}")
        if hash_kind not in COUNT_HASHES:
            raise ValueError(f"count_hash must be one of {COUNT_HASHES}, got {hash_kind!r}")
        super().__init__(
            coef=coef, agents=agents, observation_dims=observation_dims, teams=teams, scope=scope
        )
        self.hash_kind, self.decimals = hash_kind, decimals
        # One hyperplane set per width, the same on every runner (seeded by the run).
        if scope == "team":
            widths = {sum(self.dims[i] for i in team) for team in teams}
        else:
            widths = set(self.dims)
        self.projections = {
            width: simhash_projection(width, hash_bits, seed=0 if seed is None else seed)
            for width in widths
        }
        self.key = uuid.uuid4().hex  # this runner's own table in the merged state
        self.own: dict[int, int] = {}
        self.others: dict[int, int] = {}  # every other runner's visits, at the last sync
        self.tables: dict[str, dict[int, int]] = {}

    def _codes(self, rows: np.ndarray) -> np.ndarray:
        if self.hash_kind == "exact":
            return rounded_row_codes(rows, decimals=self.decimals)
        return simhash_codes(rows, self.projections[rows.shape[1]])

    def input_bonus(self, kind: str, index: int, rows: np.ndarray) -> np.ndarray:
        # Agents' and teams' tables apart: a key per input xor-ed into the codes.
        key = index + 1 if kind == "agent" else len(self.agents) + 1 + index
        codes = self._codes(rows) ^ np.uint64(key)
        counts = visit_counts(codes, self.own)
        counts += np.array([self.others.get(int(c), 0) for c in codes.tolist()], np.int64)
        return count_bonus(counts, coef=self.coef)

    def get_state(self) -> dict:
        return {"tables": {**self.tables, self.key: dict(self.own)}}

    def set_state(self, state: dict) -> None:
        tables = dict(state.get("tables", {}))
        if self.key in tables:
            # Visits counted here since the state was taken are kept.
            mine = tables.pop(self.key)
            if sum(mine.values()) > sum(self.own.values()):
                self.own = dict(mine)
        self.tables = tables
        others: dict[int, int] = {}
        for table in tables.values():
            for code, visits in table.items():
                others[code] = others.get(code, 0) + visits
        self.others = others

    @staticmethod
    def merge_states(states: list[dict]) -> dict:
        """Every runner's latest table: per key, the one with the most visits."""
        merged: dict[str, dict[int, int]] = {}
        for state in states:
            for key, table in state.get("tables", {}).items():
                if key not in merged or sum(table.values()) > sum(merged[key].values()):
                    merged[key] = table
        return {"tables": merged}


def rnd_input_key(kind: str, index: int) -> str:
    """The RND module's key of an agent's input (its index) or a team's (``team_k``)."""
    return str(index) if kind == "agent" else f"team_{index}"


def rnd_input_widths(dims: list[int], teams: list, scope: str) -> dict[str, int]:
    """``{key: width}`` of RND's inputs (the module's ``rnd_inputs``)."""
    if scope == "team":
        return {
            rnd_input_key("team", k): sum(dims[i] for i in team) for k, team in enumerate(teams)
        }
    return {rnd_input_key("agent", i): dim for i, dim in enumerate(dims)}


class RNDSignal(NoveltySignal):
    """``r_int = c * e / (e + e_ref)`` (``ops.novelty.rnd_bonus``) with ``e`` the error of
    RND's predictor on the next observation (``policies.rnd``); the networks live in
    the RLModule the env runner holds (``bind_module``), trained by the learner."""

    def __init__(self, *, coef, agents, observation_dims, teams, scope) -> None:
        super().__init__(
            coef=coef, agents=agents, observation_dims=observation_dims, teams=teams, scope=scope
        )
        self.module = None

    def input_bonus(self, kind: str, index: int, rows: np.ndarray) -> np.ndarray:
        if self.module is None:
            raise RuntimeError(
                "intrinsic_reward: rnd has no RND module: the connector's bind_module was "
                "never called with the env runner's RLModule"
            )
        rnd = self.module[RND_MODULE_ID]
        errors = rnd.errors(rnd_input_key(kind, index), rows)
        return rnd_bonus(errors, float(rnd.reference), coef=self.coef)

    def get_state(self) -> dict:
        return {}  # the networks are module weights

    def set_state(self, state: dict) -> None:
        pass

    @staticmethod
    def merge_states(states: list[dict]) -> dict:
        return {}
