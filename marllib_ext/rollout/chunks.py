"""RLlib episode chunks from a batched rollout block, built once per (world, episode)
piece from ``(T, B, ...)`` arrays, as RLlib's per-world path would have recorded them
through ``envs.adapter``: each present agent's observations (with its action mask),
actions, rewards and model outputs; the global state and every present agent's step
reward in each info; each agent's cost and its team's where the env reports them;
``success`` in the last step's infos; an agent that died
terminated at its death step and absent afterwards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from marllib_ext.envs.adapter import (
    ACTION_MASK_KEY,
    COST_KEY,
    OBSERVATION_KEY,
    STATE_KEY,
    STEP_REWARDS_KEY,
    SUCCESS_KEY,
    TEAM_COST_KEY,
)
from marllib_ext.envs.arrays import WorldArrays
from marllib_ext.rllib_compat.env_runners import episode_from_agent_chunks


@dataclass
class SampledSteps:
    """A ``sample()`` call's steps of every world.

    ``first``: the worlds at the block's start; ``steps[t]``: step ``t``'s result
    (terminal observations where an episode ended); ``resets[t]``: the arrays after the
    resets that followed step ``t`` (``None`` where no world ended); ``alive[t]``:
    ``(B, n_agents)`` the agents present (acting) at step ``t``; ``acted[t]``: the
    arrays step ``t`` acted on (kept where the block goes to the learner as arrays)."""

    agents: list[str]
    first: WorldArrays
    steps: list[WorldArrays]
    resets: list[WorldArrays | None]
    alive: np.ndarray
    actions: list[dict[str, np.ndarray]]
    outputs: list[dict[str, dict[str, np.ndarray]]]
    times: np.ndarray
    acted: list[WorldArrays] | None = None  # the worlds each step acted on
    starts: np.ndarray | None = None  # (T, B) the world's episode began at step t


def joined_observations(observations: dict[str, np.ndarray], agents: list[str]) -> np.ndarray:
    """The state of a simulator without one: every agent's observation joined in
    ``agents`` order along the last axis (``(..., sum of obs dims)``)."""
    return np.concatenate([observations[a] for a in agents], axis=-1)


def stacked_arrays(arrays: list[WorldArrays], agents: list[str]):
    """``(observations, action_masks, states)`` of per-step arrays stacked over time
    (``(T, B, ...)``; the state is every observation joined where the simulator has
    none)."""
    observations = {a: np.stack([s.observations[a] for s in arrays]) for a in agents}
    masks = None
    if arrays[0].action_masks is not None:
        masks = {a: np.stack([s.action_masks[a] for s in arrays]) for a in agents}
    if arrays[0].state is not None:
        states = np.stack([s.state for s in arrays])
    else:
        states = joined_observations(observations, agents)
    return observations, masks, states


class StepArrays:
    """A block's per-step lists stacked into ``(T, B, ...)`` arrays, once: what each
    step returned (``obs``, ``masks``, ``state`` after the step; ``rewards``,
    ``terminated``, ``truncated``, ``died``, ``success``), the actions taken and the
    module outputs kept. Both forms a sampler hands over are built from it: episode
    chunks (``build_chunk``) and rollout blocks (``direct.rollout_block``)."""

    def __init__(self, block: SampledSteps) -> None:
        agents, steps = block.agents, block.steps
        self.block = block
        self.terminated = np.stack([s.terminated for s in steps])  # (T, B)
        self.truncated = np.stack([s.truncated for s in steps])
        self.obs, self.masks, self.state = stacked_arrays(steps, agents)
        self.actions = {a: np.stack([step[a] for step in block.actions]) for a in agents}
        self.rewards = np.stack([np.stack([s.rewards[a] for a in agents], -1) for s in steps])
        self.died = np.zeros_like(block.alive)
        if steps[0].died is not None:
            self.died = np.stack([np.stack([s.died[a] for a in agents], -1) for s in steps])
        self.success = None  # (T, B) 1/0 where the env reported success, NaN elsewhere
        if any(s.success is not None for s in steps):
            unreported = np.full(len(self.terminated[0]), np.nan)
            self.success = np.stack(
                [unreported if s.success is None else s.success.astype(float) for s in steps]
            )
        self.costs = self.team_costs = None  # {agent: (T, B)}
        if any(s.costs is not None for s in steps):
            self.costs = _stacked_per_agent([s.costs for s in steps], agents)
            self.team_costs = _stacked_per_agent([s.team_costs for s in steps], agents)
        self.outputs = {
            a: {k: np.stack([out[a][k] for out in block.outputs]) for k in block.outputs[0][a]}
            for a in agents
        }

    def step_rewards(self) -> list[list[dict[str, float]]]:
        """``{agent: reward}`` of the agents present at each step, per ``(t, world)``,
        as the adapter reports them in the infos."""
        agents = self.block.agents
        return [
            [
                {a: r for a, r, here in zip(agents, rewards, present, strict=True) if here}
                for rewards, present in zip(step_rewards, step_alive, strict=True)
            ]
            for step_rewards, step_alive in zip(
                self.rewards.tolist(), self.block.alive.tolist(), strict=True
            )
        ]

    def first_of(self, start: int) -> WorldArrays:
        return self.block.first if start == 0 else self.block.resets[start - 1]

    def state_of(self, first: WorldArrays, world: int) -> np.ndarray:
        if first.state is not None:
            return first.state[world]
        agents = self.block.agents
        return joined_observations({a: first.observations[a][world] for a in agents}, agents)


def _stacked_per_agent(per_step: list, agents: list[str]) -> dict[str, np.ndarray]:
    """``{agent: (T, B)}`` from per-step ``{agent: (B,)}`` (0 where a step has none)."""
    width = next(len(step[agents[0]]) for step in per_step if step is not None)
    zeros = np.zeros(width)
    return {
        agent: np.stack([zeros if step is None else step[agent] for step in per_step])
        for agent in agents
    }


def _agent_infos(arrays: StepArrays, infos: list[dict], agent: str, world: int, start: int):
    """One agent's infos over a chunk's steps: the shared ones, with the agent's cost
    and its team's after each step where the env reports costs."""
    infos = [dict(info) for info in infos]
    if arrays.costs is not None:
        for k, info in enumerate(infos[1:]):
            info[COST_KEY] = float(arrays.costs[agent][start + k, world])
            info[TEAM_COST_KEY] = float(arrays.team_costs[agent][start + k, world])
    return infos


def build_chunk(
    arrays: StepArrays,
    *,
    step_rewards: list[list[dict[str, float]]],
    world: int,
    start: int,
    stop: int,
    done: bool,
    episode_id: str,
    env_t_started: int,
    first_rewards: dict[str, float],
    module_of: dict[str, str],
    mapping_fn: Any,
    seq_no: int,
) -> MultiAgentEpisode:
    """The chunk of world ``world``'s episode over block steps ``start .. stop - 1``
    (``step_rewards``: ``arrays.step_rewards()``)."""
    block = arrays.block
    first = arrays.first_of(start)
    world_terminated = done and bool(arrays.terminated[stop - 1, world])
    world_truncated = done and not world_terminated
    states = [arrays.state_of(first, world), *arrays.state[start:stop, world]]
    rewards = [first_rewards, *(step_rewards[t][world] for t in range(start, stop))]
    infos = [{STATE_KEY: s, STEP_REWARDS_KEY: r} for s, r in zip(states, rewards, strict=True)]
    if done and arrays.success is not None and not np.isnan(arrays.success[stop - 1, world]):
        infos[-1][SUCCESS_KEY] = bool(arrays.success[stop - 1, world])
    agent_episodes = {}
    for index, agent in enumerate(block.agents):
        if not block.alive[start, world, index]:
            continue  # died earlier in this episode
        deaths = np.flatnonzero(arrays.died[start:stop, world, index])
        end = start + int(deaths[0]) + 1 if len(deaths) else stop
        died = bool(len(deaths))
        observations = np.concatenate(
            [first.observations[agent][world][None], arrays.obs[agent][start:end, world]]
        )
        if arrays.masks is not None:
            masks = np.concatenate(
                [first.action_masks[agent][world][None], arrays.masks[agent][start:end, world]]
            )
            observations = {OBSERVATION_KEY: observations, ACTION_MASK_KEY: masks}
        outputs = {k: v[start:end, world] for k, v in arrays.outputs[agent].items()}
        outputs[WEIGHTS_SEQ_NO] = np.full(end - start, seq_no)
        at_end = end == stop
        agent_episodes[agent] = SingleAgentEpisode(
            # The same id in every chunk of the episode, as RLlib's cut() keeps it (a
            # replay buffer joins the chunks by it).
            id_=f"{episode_id}-{agent}",
            agent_id=agent,
            module_id=module_of[agent],
            multi_agent_episode_id=episode_id,
            observations=observations,
            actions=arrays.actions[agent][start:end, world],
            rewards=arrays.rewards[start:end, world, index],
            infos=_agent_infos(arrays, infos[: end - start + 1], agent, world, start),
            extra_model_outputs=outputs,
            terminated=died or (at_end and world_terminated),
            truncated=not died and at_end and world_truncated,
            t_started=env_t_started,
            len_lookback_buffer=0,
        )
    return episode_from_agent_chunks(
        id_=episode_id,
        agent_episodes=agent_episodes,
        env_t_started=env_t_started,
        length=stop - start,
        terminated=world_terminated,
        truncated=world_truncated,
        agent_module_ids=module_of,
        agent_to_module_mapping_fn=mapping_fn,
    )
