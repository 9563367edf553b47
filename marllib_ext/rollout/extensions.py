"""What an algorithm's env-to-module connector does on the batched rollout.

RLlib runs env-to-module connectors world by world on episode objects; the batched
rollout has neither. A connector takes the batched path when it has an array form,
``connector.array_form(agents, num_envs)``, an ``ObservationExtension``: it changes
the observations of all worlds at once and keeps its own per-world state from what
each step hands out (EFX's budget: ``postprocessing.budget_arrays``)."""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np
from ray.rllib.core.columns import Columns

from marllib_ext.envs.arrays import WorldArrays
from marllib_ext.rollout.chunks import joined_observations


class ObservationExtension(Protocol):
    """An env-to-module connector's form over ``(B, ...)`` world arrays."""

    def start(self, worlds: np.ndarray) -> None:
        """New episodes begin in ``worlds`` (indices into the ``B`` worlds)."""

    def extend(self, arrays: WorldArrays) -> WorldArrays:
        """``arrays`` with the observations the module acts on (and the learner reads);
        for the worlds that just ended, their final observations."""

    def step(
        self,
        *,
        logp: np.ndarray,
        rewards: np.ndarray,
        acted: np.ndarray,
        ended: np.ndarray,
        metrics,
        observations: dict[str, np.ndarray],
    ) -> dict[str, np.ndarray] | None:
        """After one step of every world, before ``extend`` of its results: ``logp``
        ``(B, n_agents)`` of the actions taken (0 where none was sampled),
        ``rewards`` ``(B, n_agents)``, ``acted`` ``(B, n_agents)`` the agents that
        acted, ``ended`` ``(B,)`` the worlds whose episode ended; ``metrics``: the env
        runner's metrics logger (episode results are logged there); ``observations``:
        ``{agent: (B, ...)}`` after the step, before any extension (the final ones
        where a world ended). Returns ``{column: {agent: (B,)}}`` to record with the
        step's module outputs (the learner reads them in the block), or ``None``."""


def has_array_form(connector) -> bool:
    return callable(getattr(connector, "array_form", None))


def logged_by_array_form(function):
    """Marks an ``on_episode_end`` callback whose results the algorithm's
    ``ObservationExtension`` logs itself on the batched path (e.g. EFX's episode
    returns at the deployment budget): that path does not call it, and it does not
    keep a runner from handing rollout blocks."""
    function.logged_by_array_form = True
    return function


def is_logged_by_array_form(function) -> bool:
    return getattr(function, "logged_by_array_form", False)


def with_episode_end_array_form(array_form):
    """Gives an ``on_episode_end`` callback its form on rollout blocks:
    ``array_form(episodes=direct.EndedEpisodes, env_runner=..., metrics_logger=...)``
    logs from each block's ended episodes what the callback logs from one episode's
    chunks; the callback then does not keep a runner from handing blocks."""

    def mark(function):
        function.episode_end_array_form = array_form
        return function

    return mark


def episode_end_array_form(function):
    return getattr(function, "episode_end_array_form", None)


class ExtensionChain:
    """A rollout's extensions, applied in the order of their connectors."""

    def __init__(self, extensions: list[ObservationExtension], agents: list[str]) -> None:
        self.extensions = extensions
        self.agents = agents

    def __bool__(self) -> bool:
        return bool(self.extensions)

    def restarted(self, arrays: WorldArrays, worlds: np.ndarray) -> WorldArrays:
        """``arrays`` after a reset of ``worlds`` (every one of them when all reset)."""
        if not self.extensions:
            return arrays
        arrays = self._with_state(arrays)
        for extension in self.extensions:
            extension.start(worlds)
            arrays = extension.extend(arrays)
        return arrays

    def stepped(self, step: WorldArrays, outputs, acted, ended, metrics) -> WorldArrays:
        """A step's arrays after every extension has seen the step (``outputs``: each
        agent's module outputs, ``acted``: ``(B, n_agents)``, ``ended``: ``(B,)``)."""
        logp = np.zeros(acted.shape)
        for i, agent in enumerate(self.agents):
            agent_logp = outputs[agent].get(Columns.ACTION_LOGP)
            if agent_logp is not None:
                logp[:, i] = agent_logp
        rewards = np.stack([step.rewards[agent] for agent in self.agents], axis=-1)
        step = self._with_state(step)
        observations = step.observations
        for extension in self.extensions:
            columns = extension.step(
                logp=logp, rewards=rewards, acted=acted, ended=ended, metrics=metrics,
                observations=observations,
            )  # fmt: skip
            for column, values in (columns or {}).items():
                for agent, value in values.items():
                    outputs[agent][column] = value
            step = extension.extend(step)
        return step

    def _with_state(self, arrays: WorldArrays) -> WorldArrays:
        """A simulator without a state's arrays with every plain observation joined as
        the state (``chunks.joined_observations``), before an extension changes the
        observations."""
        if arrays.state is not None:
            return arrays
        return dataclasses.replace(
            arrays, state=joined_observations(arrays.observations, self.agents)
        )
