"""RLlib episode chunks as rollout blocks: the ``(T, B, ...)`` arrays a batched rollout
hands over, read back from ``MultiAgentEpisode`` chunks, so one batch builder
(``postprocessing.block_batch``) serves both sampling paths.

Each chunk becomes one world of a block; chunks with the same number of env steps and
the same agent-to-module mapping share a block (a block's worlds all end its last row,
which is then the sampler's cut, as on a batched rollout). Row ``t`` of a world is env
step ``env_t_started + t`` of its chunk; an agent is present (``alive``) at the env
steps where it observed and acted (``episode_steps.acting_steps``), so agents that
take turns, arrive late or die early keep their rows where they were.

What a chunk's episodes hold and a block's arrays take:
- observations, action masks, actions and module outputs of each acting step;
- the global state ``info["state"]`` at each env index (acted on, and after the step);
- each agent's reward at each env step from the adapter's ``info["step_rewards"]``
  (also the rewards an agent earns between its turns; without them, the agent's own
  rewards where it acted);
- each agent's ``cost`` and its team's ``team_cost`` after the step where reported;
- the observation after each step of the agents observed there (``next_present``);
- the chunk's end: terminated where every agent of the chunk terminated, truncated
  where the episode ended otherwise, neither where the sampler cut it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tree
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from marllib_ext.envs.adapter import (
    ACTION_MASK_KEY,
    COST_KEY,
    OBSERVATION_KEY,
    STATE_KEY,
    STEP_REWARDS_KEY,
    TEAM_COST_KEY,
)
from marllib_ext.rollout.blocks import RolloutBlock
from marllib_ext.rollout.episode_steps import (
    chunk_env_steps,
    chunk_step_infos,
    observed_steps,
)
from marllib_ext.rollout.recurrent import state_columns

# Module outputs a connector records after the step they belong to (the value needs the
# observation that follows, e.g. EFX's count bonus): ``custom_data[AFTER_STEP_OUTPUTS]``
# is ``{column: {agent: {agent step t: value}}}``; a chunk's rows read those of its own
# steps (entries from earlier chunks of the episode may remain).
AFTER_STEP_OUTPUTS = "after_step_outputs"


def after_step_column(chunk, column: str, agent: str, steps: int) -> np.ndarray | None:
    """``(steps,)`` the recorded ``column`` of ``agent``'s first ``steps`` actions in
    ``chunk`` (``None`` where nothing was recorded)."""
    recorded = chunk.custom_data.get(AFTER_STEP_OUTPUTS, {}).get(column, {}).get(agent)
    if recorded is None:
        return None
    first = chunk.agent_episodes[agent].t_started
    return np.array([recorded[first + k] for k in range(steps)], np.float64)


def record_after_step(episode, column: str, agent: str, value: float) -> None:
    """Records ``value`` for ``agent``'s last action in ``episode``'s ``column``."""
    sa_episode = episode.agent_episodes[agent]
    recorded = episode.custom_data.setdefault(AFTER_STEP_OUTPUTS, {}).setdefault(column, {})
    values = recorded.setdefault(agent, {})
    for step in [t for t in values if t < sa_episode.t_started]:
        del values[step]  # shipped with an earlier chunk
    values[sa_episode.t - 1] = value


NO_STATE = (
    "the joint critic needs the global state in info['state']; build the env through "
    "marllib_ext.envs (ParallelEnvAdapter)"
)


@dataclass
class _AgentSteps:
    """One agent's steps in one chunk: its observations per env index (``None``
    where it did not observe), the indices it acted at and whether it terminated."""

    observed: dict[int, int]  # env index -> row of its SingleAgentEpisode
    acting: list[int]  # env indices
    terminated: bool


def _agent_steps(chunk, agent: str) -> _AgentSteps | None:
    observed = observed_steps(chunk, agent)
    if len(observed) < 2:  # it never acted in this chunk
        return None
    sa_episode = chunk.agent_episodes[agent]
    return _AgentSteps(
        observed=dict(observed),
        acting=[index for index, _ in observed[:-1]],
        terminated=bool(sa_episode.is_terminated),
    )


def _batched(value):
    """A list of items (an episode not yet in numpy form) stacked as one array, or a
    dict of arrays for dict items."""
    if not isinstance(value, list):
        return value
    if value and isinstance(value[0], dict):
        return {key: np.stack([item[key] for item in value]) for key in value[0]}
    return np.asarray(value)


def _observation_parts(value) -> tuple[np.ndarray, np.ndarray | None]:
    """``(observations, action masks or None)`` of a stacked observation."""
    value = _batched(value)
    if isinstance(value, dict):
        return np.asarray(value[OBSERVATION_KEY]), np.asarray(value[ACTION_MASK_KEY])
    return np.asarray(value), None


class _ChunkWorld:
    """One chunk's arrays, ``(T, ...)`` per field, for the agents in ``agents``."""

    def __init__(self, chunk, agents: list[str]) -> None:
        self.length = horizon = chunk_env_steps(chunk)
        infos = chunk_step_infos(chunk)
        missing = [index for index, info in enumerate(infos) if info is None]
        if missing:
            raise RuntimeError(
                f"no agent observed env steps {missing} of chunk {chunk.id_!r}; "
                "turn-taking envs sample complete episodes (EnvSpec.turn_based)"
            )
        try:
            states = np.stack([np.asarray(info[STATE_KEY], np.float32) for info in infos])
        except (KeyError, TypeError) as e:
            raise ValueError(NO_STATE) from e
        self.states, self.next_states = states[:-1], states[1:]
        n = len(agents)
        self.alive = np.zeros((horizon, n), bool)
        self.died = np.zeros((horizon, n), bool)
        self.next_present = np.zeros((horizon, n), bool)
        self.rewards = np.zeros((horizon, n))
        self.rewarded = np.zeros((horizon, n), bool)
        self.costs = np.zeros((horizon, n))
        self.team_costs = np.zeros((horizon, n))
        self.has_costs = False
        self.observations: dict[str, np.ndarray] = {}
        self.next_observations: dict[str, np.ndarray] = {}
        self.masks: dict[str, np.ndarray] = {}
        self.next_masks: dict[str, np.ndarray] = {}
        self.actions: dict[str, np.ndarray] = {}
        self.outputs: dict[str, dict[str, np.ndarray]] = {}
        self.module_of: dict[str, str] = {}
        steps = {agent: _agent_steps(chunk, agent) for agent in agents}
        present = [agent for agent in agents if steps[agent] is not None]
        self.terminated = bool(chunk.is_done) and all(steps[a].terminated for a in present)
        self.truncated = bool(chunk.is_done) and not self.terminated
        self.started = int(chunk.env_t_started) == 0
        step_rewards = [info.get(STEP_REWARDS_KEY) for info in infos[1:]]
        for i, agent in enumerate(agents):
            if steps[agent] is not None:
                self._add_agent(chunk, agent, i, steps[agent])
            if all(step is not None for step in step_rewards):
                for t, step in enumerate(step_rewards):
                    if agent in step:
                        self.rewards[t, i] = float(step[agent])
                        self.rewarded[t, i] = True

    def _add_agent(self, chunk, agent: str, i: int, steps: _AgentSteps) -> None:
        sa_episode = chunk.agent_episodes[agent]
        self.module_of[agent] = sa_episode.module_id
        rows = sorted(steps.observed.values())
        if rows != list(range(len(rows))):
            raise RuntimeError(
                f"agent {agent!r} of chunk {chunk.id_!r} observed at rows {rows} of its episode"
            )
        # Slices, not index lists: RLlib's buffers look each listed index up one by one.
        every, acted = slice(0, len(rows)), slice(0, len(steps.acting))
        observations, masks = _observation_parts(sa_episode.get_observations(every))
        horizon = self.length
        acting = np.asarray(steps.acting, dtype=np.int64)
        taken = np.asarray([steps.observed[index] for index in steps.acting], dtype=np.int64)
        self.alive[acting, i] = True
        self.observations[agent] = _placed(observations[taken], acting, horizon)
        # After step t: the agent's observation at env index t + 1, where it has one
        # (also where it did not act at t: a turn passing to it, an arrival).
        after = np.asarray([index - 1 for index in steps.observed if index > 0], np.int64)
        after_taken = np.asarray([steps.observed[t + 1] for t in after], np.int64)
        self.next_observations[agent] = _placed(observations[after_taken], after, horizon)
        if masks is not None:
            self.masks[agent] = _placed(masks[taken], acting, horizon)
            self.next_masks[agent] = _placed(masks[after_taken], after, horizon)
        self.actions[agent] = _placed(_batched(sa_episode.get_actions(acted)), acting, horizon)
        self.outputs[agent] = {
            key: _placed(
                np.asarray(_batched(sa_episode.get_extra_model_outputs(key, acted))),
                acting, horizon,
            )
            for key in sa_episode.extra_model_outputs
            if key not in (WEIGHTS_SEQ_NO, Columns.STATE_OUT)
        }  # fmt: skip
        for column, by_agent in chunk.custom_data.get(AFTER_STEP_OUTPUTS, {}).items():
            if agent in by_agent:
                values = after_step_column(chunk, column, agent, len(steps.acting))
                self.outputs[agent][column] = _placed(values, acting, horizon)
        if Columns.STATE_OUT in sa_episode.extra_model_outputs:
            for column, states in _states_acted_from(sa_episode, len(steps.acting)).items():
                self.outputs[agent][column] = _placed(states, acting, horizon)
        self.next_present[after, i] = True
        if steps.terminated and steps.acting[-1] + 1 == max(steps.observed):
            last = steps.acting[-1]
            self.next_present[last, i] = False  # its final observation
            # Died while its world went on (the world's own end is ``terminated``).
            self.died[last, i] = not (last == horizon - 1 and self.terminated)
        infos = sa_episode.get_infos(every)
        if not any(STEP_REWARDS_KEY in info for info in infos):
            self.rewards[acting, i] = np.asarray(_batched(sa_episode.get_rewards(acted)), float)
            self.rewarded[acting, i] = True
        for index, row in steps.observed.items():
            info = infos[row]
            if index == 0 or not isinstance(info, dict) or COST_KEY not in info:
                continue
            self.has_costs = True
            self.costs[index - 1, i] = float(info[COST_KEY])
            self.team_costs[index - 1, i] = float(info.get(TEAM_COST_KEY, info[COST_KEY]))


def _states_acted_from(sa_episode, steps: int) -> dict[str, np.ndarray]:
    """A recurrent module's state each of the agent's first ``steps`` steps acted from,
    as ``rollout.recurrent.state_columns`` (``(steps, ...)`` each): the state after its
    previous step (the chunk's lookback before its first one), or RLlib's recurrent
    encoders' initial state, zeros, where the agent's episode starts in this chunk."""
    after = [sa_episode.get_extra_model_outputs(Columns.STATE_OUT, k) for k in range(steps)]
    if sa_episode.t_started > 0:
        first = sa_episode.get_extra_model_outputs(
            Columns.STATE_OUT, -1, neg_index_as_lookback=True
        )
    else:
        first = tree.map_structure(np.zeros_like, after[0])
    acted_from = tree.map_structure(lambda *states: np.stack(states), first, *after[:-1])
    return {c: np.asarray(v) for c, v in state_columns(acted_from).items()}


def _placed(values: np.ndarray, indices: np.ndarray, horizon: int) -> np.ndarray:
    """``(horizon, ...)`` zeros with ``values`` at ``indices``."""
    out = np.zeros((horizon, *values.shape[1:]), dtype=values.dtype)
    out[indices] = values
    return out


def _stacked(worlds: list[_ChunkWorld], agents: list[str], get, example: dict):
    """``{agent: (T, B, ...)}`` of ``get(world, agent)`` (``None`` where the world has
    none: zeros shaped as in ``example[agent]``, a world where the agent acted)."""
    out = {}
    for agent in agents:
        template = get(example[agent], agent)
        zeros = np.zeros((worlds[0].length, *template.shape[1:]), template.dtype)
        parts = [get(w, agent) for w in worlds]
        out[agent] = np.stack([zeros if p is None else p for p in parts], axis=1)
    return out


def _block(worlds: list[_ChunkWorld], agents: list[str], module_of: dict, example: dict):
    """One block of ``worlds`` over ``agents`` (sorted; each acted in ``example[agent]``)."""
    positions = [i for i, a in enumerate(agents) if a in example]
    agents = [agents[i] for i in positions]

    def per_step(field: str) -> np.ndarray:
        return np.stack([getattr(w, field) for w in worlds], axis=1)

    def per_agent(field: str) -> np.ndarray:
        return np.stack([getattr(w, field)[:, positions] for w in worlds], axis=1)

    def field(name: str):
        return lambda world, agent: getattr(world, name).get(agent)

    def stacked(name: str) -> dict:
        return _stacked(worlds, agents, field(name), example)

    horizon, num_worlds = worlds[0].length, len(worlds)
    terminated = np.zeros((horizon, num_worlds), bool)
    truncated = np.zeros((horizon, num_worlds), bool)
    terminated[-1] = [w.terminated for w in worlds]
    truncated[-1] = [w.truncated for w in worlds]
    starts = np.zeros((horizon, num_worlds), bool)
    starts[0] = [w.started for w in worlds]
    keys = {agent: list(example[agent].outputs[agent]) for agent in agents}
    outputs = {
        agent: {
            key: _stacked(
                worlds, [agent],
                lambda w, a, key=key: w.outputs[a][key] if a in w.outputs else None, example,
            )[agent]
            for key in keys[agent]
        }
        for agent in agents
    }  # fmt: skip
    masked = any(agent in w.masks for w in worlds for agent in agents)
    has_costs = any(w.has_costs for w in worlds)
    return RolloutBlock(
        agents=agents,
        module_of={a: module_of[a] for a in agents},
        observations=stacked("observations"),
        action_masks=stacked("masks") if masked else None,
        actions=stacked("actions"),
        outputs=outputs,
        states=per_step("states"),
        next_states=per_step("next_states"),
        next_observations=stacked("next_observations"),
        next_action_masks=stacked("next_masks") if masked else None,
        rewards=per_agent("rewards"),
        terminated=terminated,
        truncated=truncated,
        alive=per_agent("alive"),
        died=per_agent("died"),
        starts=starts,
        costs=per_agent("costs") if has_costs else None,
        team_costs=per_agent("team_costs") if has_costs else None,
        rewarded=per_agent("rewarded"),
        next_present=per_agent("next_present"),
    )


def blocks_of_chunks(episodes: list) -> list[RolloutBlock]:
    """The rollout blocks of RLlib ``MultiAgentEpisode`` chunks (see the module's
    docstring): one per group of chunks with equal env steps and agent-to-module
    mapping, each chunk one world, in the order the groups first appear. Every block
    holds every agent that acted in any chunk (absent where it did not act)."""
    agents = sorted({agent for episode in episodes for agent in episode.agent_episodes})
    worlds = [_ChunkWorld(e, agents) for e in episodes if chunk_env_steps(e) > 0]
    module_of: dict[str, str] = {}
    example: dict[str, _ChunkWorld] = {}
    for world in worlds:
        for agent, module_id in world.module_of.items():
            module_of.setdefault(agent, module_id)
            example.setdefault(agent, world)
    groups: dict[tuple, list[_ChunkWorld]] = {}
    for world in worlds:
        mapping = tuple(sorted({**module_of, **world.module_of}.items()))
        groups.setdefault((world.length, mapping), []).append(world)
    return [_block(group, agents, dict(mapping), example) for (_, mapping), group in groups.items()]
