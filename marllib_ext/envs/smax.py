"""SMAX (``smax:<scenario>``): JaxMARL's re-implementation of SMAC's unit
micromanagement, against its heuristic enemy, on its own batching.

One ``SmaxWorld`` of ``num_envs`` battles serves an env runner (``envs.batched``): a
jitted ``jax.vmap`` of ``HeuristicEnemySMAX.step_env`` steps every battle at once, and
each battle's slot hands out its result. What the adapter and the algorithms see:

- **Action masks.** Each unit's available actions (``get_avail_actions``) come with its
  observation as PettingZoo's ``{"observation", "action_mask"}``.
- **Deaths.** A unit that dies is terminated at that step and absent afterwards.
- **Global state.** SMAX's ``world_state`` goes to the critics (``state()``).
- **Episode ends.** A battle ends when one side is dead (terminated) or at
  ``max_steps`` (truncated, bootstrapped).
- **Wins.** The last step's infos carry ``success``: the enemy is all dead. ``evaluate``
  reports its rate as the win rate.

The enemy is SMAX's heuristic (``enemy_shoots``, ``attack_mode`` env args). Rewards are
SMAX's: the enemy's health lost, plus ``won_battle_bonus`` (1) for a win, shared by the
allies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv

from marllib_ext.errors import ConfigError

# SMAC's maps that SMAX re-creates, and SMAX's own (jaxmarl 0.2.0's MAP_NAME_TO_SCENARIO).
SMAX_SCENARIOS = (
    "2s3z", "3m", "3s5z", "3s5z_vs_3s6z", "3s_vs_5z", "5m_vs_6m", "6h_vs_8z", "8m",
    "10m_vs_11m", "25m", "27m_vs_30m", "smacv2_5_units", "smacv2_10_units",
    "smacv2_20_units",
)  # fmt: skip
OBSERVATION_KEY = "observation"
ACTION_MASK_KEY = "action_mask"
SUCCESS_KEY = "success"


class SmaxWorld:
    """``num_envs`` SMAX battles of one scenario and a PettingZoo slot per battle."""

    def __init__(
        self, scenario: str, num_envs: int, *, seed: int | None = None, **env_args: Any
    ) -> None:
        try:
            import jax
            from jaxmarl.environments.smax import HeuristicEnemySMAX, map_name_to_scenario
        except ImportError as e:
            raise ConfigError(
                f'smax:{scenario} needs JaxMARL: pip install -e ".[smax]" ({e})'
            ) from e
        if scenario not in SMAX_SCENARIOS:
            raise ConfigError(f"unknown SMAX scenario {scenario!r}; scenarios: {SMAX_SCENARIOS}")
        try:
            self.env = HeuristicEnemySMAX(scenario=map_name_to_scenario(scenario), **env_args)
        except TypeError as e:
            raise ConfigError(f"env 'smax:{scenario}' rejected {env_args}: {e}") from e
        self.jax = jax
        self.num_envs = num_envs
        self.agents = list(self.env.agents)
        self.num_allies = self.env.num_allies
        space = self.env.observation_space(self.agents[0])
        n_actions = int(self.env.action_space(self.agents[0]).n)
        observation = gym.spaces.Box(-np.inf, np.inf, tuple(space.shape), np.float32)
        self.observation_spaces = {
            a: gym.spaces.Dict(
                {
                    OBSERVATION_KEY: observation,
                    ACTION_MASK_KEY: gym.spaces.Box(0.0, 1.0, (n_actions,), np.float32),
                }
            )
            for a in self.agents
        }
        self.action_spaces = {a: gym.spaces.Discrete(n_actions) for a in self.agents}
        self._key = jax.random.PRNGKey(0 if seed is None else seed)
        self._reset = jax.jit(jax.vmap(self.env.reset))
        self._step = jax.jit(jax.vmap(self.env.step_env))
        self._avail = jax.jit(jax.vmap(self.env.get_avail_actions))
        self._replace = jax.jit(_replace_where)
        self.states = None
        self.slots = [SmaxSlot(self, i) for i in range(num_envs)]
        self._pending_reset: dict[int, tuple[dict, dict]] = {}
        self._pending_step: dict[int, tuple] = {}
        self._world_state = np.zeros((num_envs, 0), np.float32)

    # ---- jax -> numpy, once per batched call ------------------------------------------
    def _keys(self):
        self._key, key = self.jax.random.split(self._key)
        return self.jax.random.split(key, self.num_envs)

    def _observations(self, observations) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """``({agent: (B, obs + mask)}`` as masked dicts per world, ``world_state``)."""
        host = self.jax.device_get(observations)
        masks = self.jax.device_get(self._avail(self.states))
        per_agent = {
            a: (np.asarray(host[a], np.float32), np.asarray(masks[a], np.float32))
            for a in self.agents
        }
        return per_agent, np.array(host["world_state"], np.float32)

    def _world_observations(self, per_agent, index: int, agents) -> dict[str, Any]:
        return {
            a: {OBSERVATION_KEY: per_agent[a][0][index], ACTION_MASK_KEY: per_agent[a][1][index]}
            for a in agents
        }

    # ---- the BatchedWorld interface ---------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self._key = self.jax.random.PRNGKey(seed)
        observations, self.states = self._reset(self._keys())
        per_agent, self._world_state = self._observations(observations)
        self._pending_reset = {
            i: (self._world_observations(per_agent, i, self.agents), {a: {} for a in self.agents})
            for i in range(self.num_envs)
        }

    def reset_world(self, index: int) -> None:
        self.reset_worlds([index])

    def reset_worlds(self, indices: Sequence[int]) -> None:
        """Resets the battles ``indices`` in one batched call."""
        if self.states is None:  # nothing to keep yet (RLlib's wrapper resets a slot first)
            self.reset()
            return
        chosen = np.zeros(self.num_envs, bool)
        chosen[list(indices)] = True
        observations, fresh = self._reset(self._keys())
        self.states = self._replace(chosen, fresh, self.states)
        per_agent, world_state = self._observations(observations)
        self._world_state[chosen] = world_state[chosen]
        for i in np.flatnonzero(chosen):
            self._pending_reset[int(i)] = (
                self._world_observations(per_agent, i, self.agents),
                {a: {} for a in self.agents},
            )

    def step(self, actions: Sequence[dict[str, Any]]) -> None:
        if len(actions) != self.num_envs:
            raise ValueError(
                f"got actions for {len(actions)} battles, the batch has {self.num_envs}"
            )
        batch = np.zeros((len(self.agents), self.num_envs), np.int32)  # 0: no-op
        for i, world_actions in enumerate(actions):
            for j, agent in enumerate(self.agents):
                if agent in world_actions:
                    batch[j, i] = world_actions[agent]
        before = [slot.agents for slot in self.slots]
        observations, self.states, rewards, dones, _ = self._step(
            self._keys(), self.states, {a: batch[j] for j, a in enumerate(self.agents)}
        )
        per_agent, self._world_state = self._observations(observations)
        rewards = {a: np.asarray(r, np.float64) for a, r in self.jax.device_get(rewards).items()}
        dones = {a: np.asarray(d, bool) for a, d in self.jax.device_get(dones).items()}
        alive = np.asarray(self.jax.device_get(self.states.state.unit_alive), bool)
        step = np.asarray(self.jax.device_get(self.states.state.step))
        won = ~alive[:, self.num_allies :].any(axis=1)
        lost = ~alive[:, : self.num_allies].any(axis=1)
        for i in range(self.num_envs):
            present = before[i]  # units alive before this step (those dying now included)
            ended = bool(dones["__all__"][i])
            time_limit = ended and not (won[i] or lost[i]) and step[i] >= self.env.max_steps
            terminated = {a: bool(dones[a][i]) and not time_limit for a in present}
            truncated = {a: time_limit for a in present}
            infos = {a: {SUCCESS_KEY: bool(won[i])} if ended else {} for a in present}
            self._pending_step[i] = (
                self._world_observations(per_agent, i, present),
                {a: float(rewards[a][i]) for a in present},
                terminated,
                truncated,
                infos,
            )

    def state(self, index: int) -> np.ndarray:
        return self._world_state[index]

    def close(self) -> None:
        self._pending_reset.clear()
        self._pending_step.clear()


def _replace_where(chosen, fresh, old):
    """``fresh`` where ``chosen`` (per battle), ``old`` elsewhere, leaf by leaf."""
    import jax
    import jax.numpy as jnp

    def pick(new, previous):
        mask = chosen.reshape((-1,) + (1,) * (new.ndim - 1))
        return jnp.where(mask, new, previous)

    return jax.tree_util.tree_map(pick, fresh, old)


class SmaxSlot(ParallelEnv):
    """Battle ``index`` of a ``SmaxWorld`` as a PettingZoo ParallelEnv (dead units leave
    ``agents``). A slot of a one-battle world steps and resets it itself."""

    metadata = {"name": "smax", "is_parallelizable": True}

    def __init__(self, world: SmaxWorld, index: int) -> None:
        self.world = world
        self.index = index
        self.possible_agents = list(world.agents)
        self.agents = list(world.agents)

    def observation_space(self, agent: str) -> gym.Space:
        return self.world.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self.world.action_spaces[agent]

    def state(self) -> np.ndarray:
        if self.world.states is None:
            self.world.reset()
        return self.world.state(self.index)

    def reset(self, seed: int | None = None, options: dict | None = None):
        if self.index not in self.world._pending_reset:
            if self.world.num_envs == 1:
                self.world.reset(seed)
            else:
                self.world.reset_world(self.index)
        observations, infos = self.world._pending_reset.pop(self.index)
        self.agents = list(self.possible_agents)
        return observations, infos

    def step(self, actions: dict[str, Any]):
        if self.index not in self.world._pending_step:
            if self.world.num_envs != 1:
                raise RuntimeError(
                    f"battle {self.index} of a batch of {self.world.num_envs} SMAX battles "
                    "steps only with the batch (BatchedVectorEnv.step)"
                )
            self.world.step([actions])
        result = self.world._pending_step.pop(self.index)
        terminated, truncated = result[2], result[3]
        self.agents = [a for a in self.agents if not (terminated.get(a) or truncated.get(a))]
        return result

    def close(self) -> None:
        self.world.close()


def smax_env(scenario: str, **kwargs: Any) -> ParallelEnv:
    """One SMAX battle of ``scenario`` as a PettingZoo ParallelEnv (``kwargs``:
    ``HeuristicEnemySMAX`` / ``SMAX`` arguments, e.g. ``max_steps``, ``attack_mode``)."""
    return SmaxWorld(scenario, 1, **kwargs).slots[0]


def smax_world(scenario: str, num_envs: int, **kwargs: Any) -> SmaxWorld:
    """``num_envs`` SMAX battles of ``scenario`` stepped by one batched call."""
    return SmaxWorld(scenario, num_envs, **kwargs)
