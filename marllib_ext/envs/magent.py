"""MAgent2 battles (``magent:<task>``): flat observations and state, small maps that
train on 2 cores, teams by agent-id prefix, and an opponent team that can be played by
a fixed policy (uniform random, or a trained policy from a checkpoint)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

from marllib_ext.configs import ENV_PRESET_DIR, load_yaml
from marllib_ext.errors import ConfigError, install_hint


@dataclass(frozen=True)
class MAgentTask:
    """One MAgent2 task: its teams (name -> agent-id prefixes) and the small preset."""

    teams: dict[str, tuple[str, ...]]
    preset: dict[str, Any] = field(default_factory=dict)


# Each task's teams and small preset (configs/env_presets/magent.yaml).
MAGENT_TASKS = {
    task: MAgentTask(
        {team: tuple(prefixes) for team, prefixes in entry["teams"].items()},
        dict(entry.get("preset", {})),
    )
    for task, entry in load_yaml(ENV_PRESET_DIR / "magent.yaml").items()
}


def _flat_box(space: gym.Space) -> gym.spaces.Box:
    flat = gym.spaces.flatten_space(space)
    return gym.spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32))


class FlatMAgent(BaseParallelWrapper):
    """MAgent2's image observations (view x view x channels) and state, flattened."""

    def observation_space(self, agent):
        return _flat_box(self.env.observation_space(agent))

    def _flat(self, observations):
        return {a: np.asarray(o, np.float32).reshape(-1) for a, o in observations.items()}

    def reset(self, seed=None, options=None):
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._flat(observations), infos

    def step(self, actions):
        observations, *rest = self.env.step(actions)
        return self._flat(observations), *rest

    def state(self):
        """MAgent2's global state; a team wiped out leaves its layers at zero (MAgent2's
        own ``state()`` fails on a team without positions: ``zip(*[])``)."""
        base = self.env.unwrapped
        handles = base._all_handles
        base._all_handles = [h for h in handles if len(base.env.get_pos(h))]
        try:
            return np.asarray(self.env.state(), np.float32).reshape(-1)
        finally:
            base._all_handles = handles


class FixedOpponent(BaseParallelWrapper):
    """Hides the agents whose ids start with ``prefixes`` and plays them with
    ``policy(agent, observation) -> action``: the learning agents train against a fixed
    team. Its agents' rewards are left out; the episode ends when the env's does."""

    def __init__(self, env: ParallelEnv, prefixes: tuple[str, ...], policy) -> None:
        super().__init__(env)
        self.prefixes, self.policy = prefixes, policy
        self.possible_agents = [a for a in env.possible_agents if not a.startswith(prefixes)]
        if len(self.possible_agents) == len(env.possible_agents):
            raise ConfigError(f"no agent of the env starts with {prefixes}")
        self._opponent_obs: dict[str, Any] = {}
        # The opponent agents that died this episode (their terminations are hidden).
        self.opponents_dead: set[str] = set()

    @property
    def agents(self):
        return [a for a in self.env.agents if not a.startswith(self.prefixes)]

    def _split(self, values: dict) -> tuple[dict, dict]:
        mine = {a: v for a, v in values.items() if not a.startswith(self.prefixes)}
        return mine, {a: v for a, v in values.items() if a.startswith(self.prefixes)}

    def reset(self, seed=None, options=None):
        observations, infos = self.env.reset(seed=seed, options=options)
        self.opponents_dead = set()
        observations, self._opponent_obs = self._split(observations)
        return observations, self._split(infos)[0]

    def step(self, actions):
        opponents = {
            a: self.policy(a, obs) for a, obs in self._opponent_obs.items() if a in self.env.agents
        }
        observations, rewards, terminations, truncations, infos = self.env.step(
            {**actions, **opponents}
        )
        observations, opponent_obs = self._split(observations)
        self.opponents_dead |= {a for a, t in self._split(terminations)[1].items() if t}
        done = {**terminations, **truncations}
        self._opponent_obs = {
            a: o
            for a, o in opponent_obs.items()
            if not (terminations.get(a) or truncations.get(a)) or not done
        }
        return (
            observations,
            self._split(rewards)[0],
            self._split(terminations)[0],
            self._split(truncations)[0],
            self._split(infos)[0],
        )

    def state(self):
        return self.env.state()


def random_policy(env: ParallelEnv, seed: int | None = None):
    """Uniform random actions from each agent's action space."""
    rng = np.random.default_rng(seed)

    def act(agent: str, observation) -> int:
        return int(rng.integers(env.action_space(agent).n))

    return act


def checkpoint_policy(path: str, seed: int | None = None):
    """Actions sampled from the policies of a checkpoint of this package: each agent's
    own (``share_policy="individual"``), its group's (``"group"``: the id prefix without
    its ``_``) or the shared one (``"all"``), whichever the checkpoint holds."""
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModule

    modules_dir = Path(path) / "learner_group" / "learner" / "rl_module"
    if not modules_dir.is_dir():
        raise ConfigError(f"opponent checkpoint {path!r} holds no policies ({modules_dir})")
    modules: dict[str, Any] = {}
    generator = torch.Generator().manual_seed(seed or 0)

    def module_of(agent: str):
        for policy_id in (agent, agent.rpartition("_")[0], "shared"):
            if policy_id in modules:
                return modules[policy_id]
            if (modules_dir / policy_id).is_dir():
                modules[policy_id] = RLModule.from_checkpoint(modules_dir / policy_id)
                return modules[policy_id]
        raise ConfigError(f"opponent checkpoint {path!r} has no policy for agent {agent!r}")

    def act(agent: str, observation) -> int:
        if isinstance(observation, dict):  # masked observations
            obs = {
                k: torch.as_tensor(np.asarray(v, np.float32)[None]) for k, v in observation.items()
            }
        else:
            obs = torch.as_tensor(np.asarray(observation, np.float32)[None])
        with torch.no_grad():
            out = module_of(agent).forward_inference({Columns.OBS: obs})
        logits = out[Columns.ACTION_DIST_INPUTS][0]
        return int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))

    return act


def magent_env(
    task: str,
    opponent: str | None = None,
    opponent_team: str | None = None,
    seed: int | None = None,
    **kwargs: Any,
) -> ParallelEnv:
    """``magent2.environments.<task>.parallel_env`` on the small preset (``kwargs``
    override it), flattened; ``opponent``: ``"random"`` or ``"checkpoint:<path>"`` plays
    ``opponent_team`` (default: the task's last team) with that fixed policy."""
    try:
        module = importlib.import_module(f"magent2.environments.{task}")
    except ImportError as e:
        raise ConfigError(f"magent:{task} needs MAgent2: {install_hint('magent')} ({e})") from e
    spec = MAGENT_TASKS[task]
    try:
        env: ParallelEnv = FlatMAgent(module.parallel_env(**{**spec.preset, **kwargs}))
    except (AssertionError, TypeError, ValueError) as e:
        raise ConfigError(f"env 'magent:{task}' rejected {kwargs}: {e}") from e
    if opponent is None:
        return env
    team = opponent_team or list(spec.teams)[-1]
    if team not in spec.teams:
        raise ConfigError(f"opponent_team {team!r} is not a team of {task}: {list(spec.teams)}")
    prefixes = spec.teams[team]
    if opponent == "random":
        policy = random_policy(env, seed)
    elif opponent.startswith("checkpoint:"):
        policy = checkpoint_policy(opponent.partition(":")[2], seed)
    else:
        raise ConfigError(f"opponent must be 'random' or 'checkpoint:<path>', got {opponent!r}")
    return FixedOpponent(env, prefixes, policy)
