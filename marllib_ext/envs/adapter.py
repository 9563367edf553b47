"""PettingZoo ParallelEnv -> RLlib MultiAgentEnv, with the global state in every info."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
from ray.rllib.utils.annotations import override

STATE_KEY = "state"
# Every agent's reward of the step that led to this observation, {agent: reward}: the
# team reward of an env step even when the agents that earned it are not observing
# (RLlib credits such a reward to an agent's next row, a turn later on AEC envs).
STEP_REWARDS_KEY = "step_rewards"
# Per-agent cost reported by the env (safe MARL), and the team's sum added here.
COST_KEY = "cost"
TEAM_COST_KEY = "team_cost"
STATE_SOURCES = ("auto", "env", "observations", "latest_observations")
# PettingZoo's action-mask convention: a dict observation {"observation", "action_mask"}
# or the mask in the agent's info. The adapter always hands RLlib the dict form.
OBSERVATION_KEY = "observation"
ACTION_MASK_KEY = "action_mask"
# An env's report that the episode reached its goal (a won battle, a solved task), in
# the infos of the episode's last step.
SUCCESS_KEY = "success"
# Env arguments that shape the training reward only, and their values for evaluation
# (Overcooked's shaped reward): evaluations report the env's own return.
TRAINING_ONLY_ENV_ARGS = {"shaped_reward": 0.0}
MASK_SOURCES = ("auto", "observation", "info", "none")


def _env_has_state(env: ParallelEnv) -> bool:
    try:
        env.state()
    except (NotImplementedError, AttributeError):
        return False
    return True


# info entries of the step where an agent broke the env contract (the episode ends
# there): a non-finite reward, or an action mask with no legal action.
NONFINITE_REWARD_KEY = "nonfinite_reward"
EMPTY_ACTION_MASK_KEY = "empty_action_mask"


def breach_metric(key: str, field: str) -> str:
    """Env-runner metric name of one report field, e.g. ``env_nonfinite_reward_episodes``."""
    return f"env_{key}_{field}"


def log_contract_report(metrics_logger, key: str, report: dict) -> None:
    """One episode's report of a broken env contract (``key``: the info key) as the
    env-runner metrics the driver raises on (``algos.env_checks``)."""
    metrics_logger.log_value(breach_metric(key, "episodes"), 1, reduce="sum")
    for field in ("agent_index", "env_step"):
        metrics_logger.log_value(breach_metric(key, field), report[field], reduce="min")


def has_action_mask(space: gym.Space) -> bool:
    """Whether ``space`` is the adapter's masked observation space."""
    return isinstance(space, gym.spaces.Dict) and ACTION_MASK_KEY in space.spaces


def plain_observation_space(space: gym.Space) -> gym.Space:
    """The observation part of a masked observation space; other spaces unchanged."""
    return space[OBSERVATION_KEY] if has_action_mask(space) else space


def masked_observation_space(observation: gym.Space, n_actions: int) -> gym.spaces.Dict:
    """``Dict(observation=<flat Box>, action_mask=Box(0, 1, (n_actions,)))``."""
    if not (isinstance(observation, gym.spaces.Box) and len(observation.shape) == 1):
        observation = gym.spaces.flatten_space(observation)
    return gym.spaces.Dict(
        {
            OBSERVATION_KEY: gym.spaces.Box(
                observation.low.astype(np.float32),
                observation.high.astype(np.float32),
                dtype=np.float32,
            ),
            ACTION_MASK_KEY: gym.spaces.Box(0.0, 1.0, (n_actions,), np.float32),
        }
    )


class ParallelEnvAdapter(ParallelPettingZooEnv):
    """RLlib's ``ParallelPettingZooEnv`` that also reports the global state.

    Every agent's info dict carries ``info["step_rewards"]`` (every agent's reward of
    the step just taken) and ``info["state"]``: ``env.state()`` when the env
    implements it (``state_source="env"``, or ``"auto"``), else all agents'
    flattened observations concatenated in sorted agent-id order
    (``state_source="observations"``; an agent that does not observe at a step has
    zeros there, or with ``"latest_observations"`` its most recent observation of the
    episode, which on turn-taking envs puts every player's last view in the state).
    Critics on the learner read it from the episodes, so the actors never see it.

    Action masks: with ``action_mask="auto"`` an env whose observations are dicts with an
    ``action_mask`` entry (``"observation"``), or whose reset infos carry one
    (``"info"``), gets masked observations ``{"observation": flat float32,
    "action_mask": float32 0/1}``. An agent left with no legal action ends the episode
    with a report in the infos (``empty_action_mask``) that the driver turns into an
    error naming the agent and the env step.

    When the env reports a per-agent cost in ``info["cost"]``, every agent's info also
    gets ``info["team_cost"]``, the sum over the agents of its team (``team_of``; one
    team by default) that reported one (non-finite or non-numeric costs raise a
    ``ValueError`` naming the agent).

    Agents may be absent from a step's observations (dead, not yet arrived, or waiting
    for their turn); the spaces cover every ``possible_agents`` entry.
    """

    def __init__(
        self,
        env: ParallelEnv,
        *,
        state_source: str = "auto",
        env_name: str | None = None,
        team_of: Mapping[str, str] | None = None,
        action_mask: str = "auto",
    ) -> None:
        if state_source not in STATE_SOURCES:
            raise ValueError(f"state_source must be one of {STATE_SOURCES}, got {state_source!r}")
        if action_mask not in MASK_SOURCES:
            raise ValueError(f"action_mask must be one of {MASK_SOURCES}, got {action_mask!r}")
        super().__init__(env)
        self.env_name = env_name or type(env).__name__
        self.env_t = 0
        self._sorted_agents = sorted(self.par_env.possible_agents)
        self.mask_source = self._mask_source(action_mask)
        self._raw_spaces = {a: self.par_env.observation_space(a) for a in self._sorted_agents}
        self.observation_space = gym.spaces.Dict(
            {a: self._observation_space(a) for a in self._sorted_agents}
        )
        self.action_space = gym.spaces.Dict(
            {a: self.par_env.action_space(a) for a in self._sorted_agents}
        )
        if state_source == "auto":
            state_source = "env" if _env_has_state(self.par_env) else "observations"
        elif state_source == "env" and not _env_has_state(self.par_env):
            raise ValueError(f"state_source='env' but {type(env).__name__} has no state()")
        self.state_source = state_source
        self.state_space = self._build_state_space()
        self.team_of = dict(team_of or {})
        self.env_t = 0
        self.latest_parts: dict[str, np.ndarray] = {}  # each agent's last observation

    # ---- action masks ---------------------------------------------------------------
    def _mask_source(self, requested: str) -> str:
        spaces = {a: self.par_env.observation_space(a) for a in self._sorted_agents}
        in_observation = [
            a
            for a, space in spaces.items()
            if isinstance(space, gym.spaces.Dict) and ACTION_MASK_KEY in space.spaces
        ]
        if requested == "auto":
            if in_observation:
                requested = "observation"
            else:
                _, infos = self.par_env.reset()
                has_info_mask = any(ACTION_MASK_KEY in (info or {}) for info in infos.values())
                requested = "info" if has_info_mask else "none"
        if requested == "observation" and len(in_observation) != len(spaces):
            missing = sorted(set(spaces) - set(in_observation))
            raise ValueError(
                f"action_mask='observation' but the observations of {missing} are not dicts "
                f"with an {ACTION_MASK_KEY!r} entry"
            )
        if requested != "none":
            for agent in self._sorted_agents:
                if not isinstance(self.par_env.action_space(agent), gym.spaces.Discrete):
                    raise ValueError(
                        f"action masks need Discrete action spaces; agent {agent!r} has "
                        f"{self.par_env.action_space(agent)}"
                    )
        return requested

    def _inner_space(self, agent: str) -> gym.Space:
        raw = self._raw_spaces[agent]
        return raw[OBSERVATION_KEY] if self.mask_source == "observation" else raw

    def _observation_space(self, agent: str) -> gym.Space:
        if self.mask_source == "none":
            return self._raw_spaces[agent]
        n_actions = int(self.par_env.action_space(agent).n)
        return masked_observation_space(self._inner_space(agent), n_actions)

    def _masked(self, agent: str, observation: Any, info: Mapping | None) -> dict[str, Any]:
        if self.mask_source == "observation":
            plain, mask = observation[OBSERVATION_KEY], observation[ACTION_MASK_KEY]
        else:
            plain = observation
            mask = (info or {}).get(ACTION_MASK_KEY)
            if mask is None:
                raise ValueError(
                    f"env {self.env_name!r}: agent {agent!r} has no info['action_mask'] at "
                    f"env step {self.env_t} (its other steps carry one)"
                )
        return {
            OBSERVATION_KEY: gym.spaces.flatten(self._inner_space(agent), plain).astype(np.float32),
            ACTION_MASK_KEY: np.asarray(mask, dtype=np.float32).reshape(-1),
        }

    def _with_masks(self, observations: dict[str, Any], infos: Mapping) -> dict[str, Any]:
        if self.mask_source == "none":
            return observations
        return {a: self._masked(a, obs, infos.get(a)) for a, obs in observations.items()}

    def _empty_masks(
        self, observations: dict[str, Any], terminateds: Mapping, truncateds: Mapping
    ) -> list[str]:
        """Agents that must act next and have no legal action."""
        if self.mask_source == "none":
            return []
        return [
            agent
            for agent, obs in observations.items()
            if not (terminateds.get(agent) or truncateds.get(agent))
            and not obs[ACTION_MASK_KEY].any()
        ]

    # ---- global state -----------------------------------------------------------------
    def _build_state_space(self) -> gym.spaces.Box:
        if self.state_source == "env":
            dim = int(np.prod(np.shape(self.par_env.state())))
        else:
            dim = sum(
                gym.spaces.flatdim(plain_observation_space(self._observation_space(agent)))
                for agent in self._sorted_agents
            )
        return gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)

    def _global_state(self, observations: dict[str, Any]) -> np.ndarray:
        """``observations``: as handed to RLlib (masked dicts where the env has masks)."""
        if self.state_source == "env":
            return np.asarray(self.par_env.state(), dtype=np.float32).reshape(-1)
        parts = []
        for agent in self._sorted_agents:
            # The spaces built once: a Box's init (its repr) costs ~0.5 ms per step.
            space = plain_observation_space(self.observation_space[agent])
            if agent in observations:
                observation = observations[agent]
                if self.mask_source != "none":
                    observation = observation[OBSERVATION_KEY]
                part = gym.spaces.flatten(space, observation)
                self.latest_parts[agent] = part
            elif self.state_source == "latest_observations" and agent in self.latest_parts:
                part = self.latest_parts[agent]
            else:
                part = np.zeros(gym.spaces.flatdim(space), np.float32)
            parts.append(part)
        return np.concatenate(parts).astype(np.float32)

    def _add_state(
        self,
        observations: dict[str, Any],
        infos: dict[str, Any],
        rewards: Mapping[str, float] | None = None,
    ) -> dict[str, Any]:
        state = self._global_state(observations)
        infos = dict(infos or {})
        costs = {a: info[COST_KEY] for a, info in infos.items() if COST_KEY in (info or {})}
        cost_of_team = {}
        if costs:
            by_team: dict[str, dict[str, Any]] = {}
            for agent, cost in costs.items():
                by_team.setdefault(self.team_of.get(agent), {})[agent] = cost
            cost_of_team = {team: team_cost(team_costs) for team, team_costs in by_team.items()}
        step_rewards = {a: float(r) for a, r in (rewards or {}).items()}
        for agent in observations:
            extra = {STATE_KEY: state, STEP_REWARDS_KEY: step_rewards}
            if costs:
                extra[TEAM_COST_KEY] = cost_of_team.get(self.team_of.get(agent), 0.0)
            infos[agent] = {**infos.get(agent, {}), **extra}
        return infos

    @override(ParallelPettingZooEnv)
    def render(self):
        # RLlib's wrapper passes render_mode positionally; PettingZoo's render() takes none.
        return self.par_env.render()

    @override(ParallelPettingZooEnv)
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observations, infos = super().reset(seed=seed, options=options)
        self.env_t = 0
        self.latest_parts = {}
        observations = self._with_masks(observations, infos)
        empty = self._empty_masks(observations, {}, {})
        if empty:
            raise ValueError(
                f"env {self.env_name!r}: agent {empty[0]!r} has no legal action (all-zero "
                "action mask) at env step 0 (reset)"
            )
        return observations, self._add_state(observations, infos)

    @override(ParallelPettingZooEnv)
    def step(self, action_dict):
        observations, rewards, terminateds, truncateds, infos = self.par_env.step(action_dict)
        infos = dict(infos or {})
        observations = self._with_masks(observations, infos)
        bad = [agent for agent, reward in rewards.items() if not np.isfinite(reward)]
        if bad:
            rewards = {a: 0.0 if a in bad else r for a, r in rewards.items()}
            terminateds, truncateds, infos = self._end_with_report(
                NONFINITE_REWARD_KEY, bad[0], self.env_t, observations, rewards, infos
            )
        else:
            empty = self._empty_masks(observations, terminateds, truncateds)
            if empty:
                terminateds, truncateds, infos = self._end_with_report(
                    EMPTY_ACTION_MASK_KEY, empty[0], self.env_t + 1, observations, rewards, infos
                )
        self.env_t += 1
        terminateds, truncateds = episode_end_flags(terminateds, truncateds)
        infos = self._add_state(observations, infos, rewards)
        return observations, rewards, terminateds, truncateds, infos

    def _end_with_report(self, key, agent, env_step, observations, rewards, infos):
        """Ends the episode here; the report travels in the infos to the driver, which
        stops training with an error naming the env, the agent and the step (an
        exception in a remote env runner would only restart the runner)."""
        report = {"agent_index": self._sorted_agents.index(agent), "env_step": env_step}
        agents = set(rewards) | set(observations)
        infos = {a: {**(infos.get(a) or {}), key: report} for a in agents}
        return {a: False for a in agents}, {a: True for a in agents}, infos


def episode_end_flags(
    terminateds: dict[str, bool], truncateds: dict[str, bool]
) -> tuple[dict[str, bool], dict[str, bool]]:
    """PettingZoo per-agent flags -> RLlib flags with the right ``__all__`` entries.

    RLlib 2.60's ``MultiAgentEpisode`` declares an episode *terminated* whenever every
    agent id appears done in the flag dicts, even when all were only truncated (a time
    limit), which would stop GAE from bootstrapping. When every agent is done and not
    all terminated, the episode is reported truncated through ``__all__`` only, keeping
    per-agent ``True`` entries just for agents that really terminated.
    """
    agents = set(terminateds) | set(truncateds)
    all_terminated = bool(agents) and all(terminateds.get(a, False) for a in agents)
    all_done = bool(agents) and all(
        terminateds.get(a, False) or truncateds.get(a, False) for a in agents
    )
    if all_done and not all_terminated:
        kept = {a: True for a in agents if terminateds.get(a, False)}
        return {**kept, "__all__": False}, {"__all__": True}
    return (
        {**terminateds, "__all__": all_terminated},
        {**truncateds, "__all__": all_done and not all_terminated},
    )


def team_cost(costs: dict[str, Any]) -> float:
    """Sum of the agents' ``info["cost"]``; a clear error for a non-finite cost."""
    total = 0.0
    for agent, cost in costs.items():
        try:
            value = float(cost)
        except (TypeError, ValueError) as e:
            raise ValueError(f"info['cost'] of agent {agent!r} is not a number: {cost!r}") from e
        if not np.isfinite(value):
            raise ValueError(f"info['cost'] of agent {agent!r} is {value}; costs must be finite")
        total += value
    return total
