"""EFX's intrinsic reward signals on the env runners (setting ``intrinsic_reward``).

Whatever the signal, it hands the budget one ``(B, n_agents)`` array ``r_int`` per step
of ``B`` worlds: the team intrinsic reward, the budget z, the outer loop and the
conservative advantage are the same code for every signal.

- ``surprisal``: seed 000's ``r_int = -c * log pi_i(a|o)`` from the log-probs logged at
  sampling; the learner recomputes it from the same column.
- ``count`` and ``rnd``: novelty of the agent's or the team's next observation
  (``novelty_signals``), recorded as the module-output column ``INTRINSIC_REWARD`` of
  each agent step, which the learner reads.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.env_to_module.observation_preprocessor import (
    MultiAgentObservationPreprocessor,
)
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override

from marllib_ext.envs.adapter import OBSERVATION_KEY
from marllib_ext.ops.novelty import (
    INTRINSIC_SIGNALS,
)
from marllib_ext.postprocessing.budget_input import plain_observation
from marllib_ext.postprocessing.novelty_signals import CountSignal, RNDSignal
from marllib_ext.rollout.episode_blocks import record_after_step

INTRINSIC_REWARD = "efx_intrinsic_reward"  # module-output column of recorded signals


class SurprisalSignal:
    """``r_int = -c * log pi``; nothing to record (the learner has the log-probs)."""

    records_column = False

    def __init__(self, coef: float) -> None:
        self.coef = coef

    def rewards(self, *, logp: np.ndarray, next_observations, acted: np.ndarray) -> np.ndarray:
        return np.where(acted, -self.coef * logp, 0.0)

    def get_state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        pass

    @staticmethod
    def merge_states(states: list[dict]) -> dict:
        return {}


def signal_class(name: str) -> type:
    """The class of the signal ``name`` (its ``merge_states`` needs no instance)."""
    classes = {"surprisal": SurprisalSignal, "count": CountSignal, "rnd": RNDSignal}
    if name not in classes:
        raise ValueError(f"intrinsic_reward must be one of {INTRINSIC_SIGNALS}, got {name!r}")
    return classes[name]


def intrinsic_signal(
    settings: Any,
    agents: list[str],
    observation_dims: dict[str, int],
    teams: list[list[int]],
    seed: int | None,
    *,
    name: str | None = None,
    coef: float | None = None,
):
    """The signal ``name`` (default ``settings.intrinsic_reward``, EFX) with
    coefficient ``coef`` (default ``settings.intrinsic_coef``), its count settings from
    ``settings``; ``teams``: each team's agents as indices into ``agents``."""
    name = getattr(settings, "intrinsic_reward", "surprisal") if name is None else name
    coef = float(settings.intrinsic_coef if coef is None else coef)
    cls = signal_class(name)
    if cls is SurprisalSignal:
        return SurprisalSignal(coef)
    novelty = {"coef": coef, "agents": agents, "observation_dims": observation_dims, "teams": teams}
    if cls is RNDSignal:
        return RNDSignal(**novelty, scope=settings.rnd_scope)
    return CountSignal(
        **novelty,
        scope=settings.count_scope,
        hash_kind=settings.count_hash,
        hash_bits=settings.count_hash_bits,
        decimals=settings.count_decimals,
        seed=seed,
    )


# Episode custom data: {agent: its agent steps counted so far} (copied across chunk cuts).
COUNTED_KEY = "intrinsic_steps_counted"


def completed_agent_steps(episode, agents: list[str], counted: dict[str, int]):
    """The agent steps of ``episode`` completed since the last call (each agent acts at
    most once per env step, so one per agent): ``(logp, rewards, acted, after,
    stepped)`` with ``logp``, ``rewards``, ``acted`` ``(1, n_agents)``, ``after``
    ``{agent: (1, ...)}`` the observation that followed, as the env gave it (connectors
    run before the episode's last observation is preprocessed), and ``stepped`` the
    ``(index, agent)`` pairs that acted; ``counted`` is updated in place."""
    n = len(agents)
    logp, rewards, acted = np.zeros((1, n)), np.zeros((1, n)), np.zeros((1, n), bool)
    after, stepped = {}, []
    for i, agent in enumerate(agents):
        sa_episode = episode.agent_episodes.get(agent)
        if sa_episode is None or sa_episode.t - counted.get(agent, 0) <= 0:
            continue
        acted[0, i] = True
        logp[0, i] = float(
            np.sum(sa_episode.get_extra_model_outputs(key=Columns.ACTION_LOGP, indices=-1))
        )
        rewards[0, i] = float(sa_episode.get_rewards(-1))
        after[agent] = np.asarray(plain_observation(sa_episode.get_observations(-1)))[None]
        stepped.append((i, agent))
        counted[agent] = sa_episode.t
    return logp, rewards, acted, after, stepped


def observation_dims(spaces, agents: list[str]) -> dict[str, int]:
    """Each agent's flat observation width, without an action mask (``{}`` without
    spaces: the surprisal signal reads no observations)."""
    if spaces is None:
        return {}
    dims = {}
    for agent in agents:
        space = spaces[agent]
        if isinstance(space, gym.spaces.Dict) and OBSERVATION_KEY in space.spaces:
            space = space[OBSERVATION_KEY]
        dims[agent] = int(np.prod(space.shape))
    return dims


class HoldsSignal:
    """A connector's intrinsic signal, built on first use by ``build_signal`` (once the
    observation spaces are known), and its state under the connector state's
    ``"signal"`` key: set before the signal exists, it is applied when it is built."""

    _signal = None
    _signal_state: dict | None = None

    def build_signal(self):
        raise NotImplementedError

    @property
    def signal(self):
        if self._signal is None:
            self._signal = self.build_signal()
            if self._signal_state is not None:
                self._signal.set_state(self._signal_state)
            if hasattr(self._signal, "module"):
                self._signal.module = self._rl_module
        return self._signal

    _rl_module = None

    def bind_module(self, rl_module) -> None:
        """The env runner's RLModule, for a signal whose networks live there (RND): the
        per-world connector binds the module each call hands it, the batched rollout
        its runner's module once."""
        self._rl_module = rl_module
        if self._signal is not None and hasattr(self._signal, "module"):
            self._signal.module = rl_module

    def __call__(self, *, rl_module, **kwargs):
        if rl_module is not self._rl_module:
            self.bind_module(rl_module)
        return super().__call__(rl_module=rl_module, **kwargs)

    def signal_state(self) -> dict:
        """``{"signal": state}``, or ``{}`` for a stateless signal."""
        state = self._signal_state if self._signal is None else self._signal.get_state()
        return {"signal": state} if state else {}

    def set_signal_state(self, state: dict) -> None:
        if "signal" not in state:
            return
        if self._signal is None:
            self._signal_state = state["signal"]
        else:
            self._signal.set_state(state["signal"])

    @staticmethod
    def merged_signal_state(states: list[dict], name: str) -> dict:
        """The runners' signal states merged (``{}`` where none has one)."""
        signal_states = [s["signal"] for s in states if "signal" in s]
        if not signal_states:
            return {}
        return {"signal": signal_class(name).merge_states(signal_states)}


class NoveltyRecorder(HoldsSignal, MultiAgentObservationPreprocessor):
    """The env-to-module connector of a plain pipeline with a novelty bonus
    (``intrinsic_bonus_coeff``): observations pass unchanged, and each agent step's
    ``r_int`` of the signal ``intrinsic_bonus`` names is recorded as the module output
    ``INTRINSIC_REWARD`` (``episode_blocks.record_after_step``; on the batched rollout
    through ``array_form``), which the learner adds to the team reward. The signal's
    state (visit counts) is merged across runners and checkpointed as the budget
    connector's is."""

    def __init__(self, input_observation_space=None, input_action_space=None, *, settings, seed):
        self.settings, self.seed = settings, seed
        super().__init__(input_observation_space, input_action_space)

    @property
    def agents(self) -> list[str]:
        return sorted(self.input_observation_space.spaces)

    def build_signal(self):
        agents = self.agents
        return intrinsic_signal(
            self.settings,
            agents,
            observation_dims(self.input_observation_space, agents),
            [list(range(len(agents)))],
            self.seed,
            name=self.settings.intrinsic_bonus,
            coef=1.0,  # the learner scales by intrinsic_bonus_coeff
        )

    @override(ConnectorV2)
    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        return input_observation_space

    def preprocess(self, observations, episode):
        if episode.env_t == 0:
            episode.custom_data[COUNTED_KEY] = {}
            return observations
        logp, _, acted, after, stepped = completed_agent_steps(
            episode, self.agents, episode.custom_data[COUNTED_KEY]
        )
        if stepped:
            intrinsic = self.signal.rewards(logp=logp, next_observations=after, acted=acted)
            for i, agent in stepped:
                record_after_step(episode, INTRINSIC_REWARD, agent, float(intrinsic[0, i]))
        return observations

    def array_form(self, agents: list[str], num_envs: int):
        return NoveltyArrays(self, agents)

    @override(ConnectorV2)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        return self.signal_state()

    @override(ConnectorV2)
    def set_state(self, state: dict) -> None:
        self.set_signal_state(state)

    @override(ConnectorV2)
    def merge_states(self, states: list[dict]) -> dict:
        return self.merged_signal_state(states, self.settings.intrinsic_bonus)


class NoveltyArrays:
    """``NoveltyRecorder`` on the batched rollout (an ``ObservationExtension``)."""

    def __init__(self, recorder: NoveltyRecorder, agents: list[str]) -> None:
        self.recorder, self.agents = recorder, list(agents)

    def start(self, worlds) -> None:
        pass

    def extend(self, arrays):
        return arrays

    def step(self, *, logp, rewards, acted, ended, metrics, observations):
        intrinsic = self.recorder.signal.rewards(
            logp=logp, next_observations=observations, acted=acted
        )
        return {INTRINSIC_REWARD: {a: intrinsic[:, i] for i, a in enumerate(self.agents)}}
