"""JaxMARL's environments (``jaxmarl:<env>[:<layout>]``) on their own batching.

One ``JaxMarlWorld`` of ``num_envs`` worlds serves an env runner (``envs.batched``): a
jitted ``jax.vmap`` of the env's ``reset`` / ``step_env`` moves every world at once, one
host copy hands the arrays to the samplers (``WorldArrays``), and each world's slot is a
PettingZoo ``ParallelEnv``. What the adapter does for every env:

- **Observations** are flattened to one ``float32`` vector per agent (Overcooked's
  ``(H, W, C)`` feature grids too, as JaxMARL's feed-forward IPPO baseline reads them;
  their space is a ``GridBox``, from which ``encoder: cnn`` rebuilds the grid).
- **Action masks** come from ``get_avail_actions`` where the env defines it (SMAX,
  Hanabi), as PettingZoo's ``{"observation", "action_mask"}``.
- **Rewards** are the env's, per agent: shared where the env shares them (Overcooked,
  Switch Riddle), each agent's own where it does not (Coin Game).
- **Episode ends.** An episode that ends at the env's time limit (``time_limit``) is
  truncated and bootstrapped; any other end terminates it.
- **Reward shaping** (Overcooked): ``shaped_reward`` times the env's shaped reward
  (``info["shaped_reward"]``: placing an onion, picking up a dish or a soup) is added
  to each agent's reward, annealed linearly to 0 over ``shaped_reward_horizon`` env
  steps of this simulator's worlds (JaxMARL's ``REW_SHAPING_HORIZON``); evaluation runs
  without it (``adapter.TRAINING_ONLY_ENV_ARGS``).

SMAX (``envs.smax``) is this world with the heuristic enemy, units that die and SMAX's
world state.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY
from marllib_ext.envs.arrays import WorldArrays
from marllib_ext.envs.batched import WorldSlot
from marllib_ext.envs.grid_space import GridBox
from marllib_ext.envs.jaxmarl_calls import replace_where, reset_worlds, step_worlds
from marllib_ext.errors import ConfigError


def has_own_avail_actions(env: Any) -> bool:
    """The env defines ``get_avail_actions`` (JaxMARL's base class raises)."""
    from jaxmarl.environments.multi_agent_env import MultiAgentEnv

    return type(env).get_avail_actions is not MultiAgentEnv.get_avail_actions


class JaxMarlWorld:
    """``num_envs`` worlds of one JaxMARL env and a PettingZoo slot per world.

    Subclasses (SMAX) override ``_pack`` (what one host copy moves) and
    ``step_arrays`` (units that die); the keys, resets and the per-world results are
    shared.
    """

    provides_state = False
    provides_action_masks = False
    slot_class: type[WorldSlot]  # set below, after the slot class

    def __init__(
        self,
        env: Any,
        num_envs: int,
        *,
        seed: int | None = None,
        render_mode: str | None = None,
        time_limit: int | None = None,
        shaped_reward: float = 0.0,
        shaped_reward_horizon: int | None = None,
        name: str = "jaxmarl",
    ) -> None:
        import jax

        if shaped_reward and not getattr(self, "reports_shaped_reward", False):
            raise ConfigError(f"env {name!r} reports no shaped reward (shaped_reward)")
        if shaped_reward_horizon is not None and shaped_reward_horizon < 1:
            raise ConfigError(f"shaped_reward_horizon must be >= 1, got {shaped_reward_horizon}")
        self.env = env
        self.jax = jax
        self.name = name
        self.render_mode = render_mode
        self.num_envs = num_envs
        self.time_limit = time_limit
        self.shaped_reward = float(shaped_reward)
        self.shaped_reward_horizon = shaped_reward_horizon
        self.steps_taken = 0  # env steps of every world, for the shaping's annealing
        self.agents = [str(a) for a in env.agents]
        self._env_agents = list(env.agents)
        self.spaces_from_env()
        # Each world's randomness depends on its own history only: (world, episode,
        # step) folded into the seed's key, so both sampling paths and any order of
        # resets replay a seed alike.
        self._key = jax.random.PRNGKey(0 if seed is None else seed)
        self._episode = np.zeros(num_envs, np.uint32)
        self._t = np.zeros(num_envs, np.uint32)
        # One compiled call per reset and per step: keys, simulation, packing.
        self._reset = jax.jit(functools.partial(reset_worlds, self))
        self._step = jax.jit(functools.partial(step_worlds, self))
        self._replace = jax.jit(replace_where)
        self._worlds = np.arange(num_envs, dtype=np.uint32)
        self.states = None
        self.slots = [self.slot_class(self, i) for i in range(num_envs)]
        self._pending_reset: dict[int, tuple[dict, dict]] = {}
        self._pending_step: dict[int, tuple] = {}
        self._current: WorldArrays | None = None

    # ---- spaces ----------------------------------------------------------------------
    def spaces_from_env(self) -> None:
        """Per agent: a flat ``float32`` Box (with a mask where the env has legal
        actions) and the env's ``Discrete`` actions."""
        first = self._env_agents[0]
        action_space = self.env.action_space(first)
        if not hasattr(action_space, "n"):
            raise ConfigError(
                f"env {self.name!r} has {type(action_space).__name__} actions; the JaxMARL "
                "adapter serves discrete actions"
            )
        # The shape reset gives: Overcooked's observation_space swaps height and width.
        observations, _ = self.jax.eval_shape(self.env.reset, self.jax.random.PRNGKey(0))
        self.observation_shape = tuple(int(d) for d in observations[first].shape)
        if len(self.observation_shape) == 3:  # a feature grid: encoder=cnn can rebuild it
            flat = GridBox(self.observation_shape)
        else:
            flat = gym.spaces.Box(
                -np.inf, np.inf, (int(np.prod(self.observation_shape)),), np.float32
            )
        n_actions = int(action_space.n)
        self.provides_action_masks = has_own_avail_actions(self.env)
        if self.provides_action_masks:
            mask = gym.spaces.Box(0.0, 1.0, (n_actions,), np.float32)
            space = gym.spaces.Dict({OBSERVATION_KEY: flat, ACTION_MASK_KEY: mask})
        else:
            space = flat
        self.observation_spaces = {a: space for a in self.agents}
        self.action_spaces = {a: gym.spaces.Discrete(n_actions) for a in self.agents}

    # ---- inside jit: one world's arrays, stacked by agent ------------------------------
    def _pack(self, observations, states):
        """``(observations (n_agents, B, obs), masks (n_agents, B, n) or None)``."""
        import jax
        import jax.numpy as jnp

        batch = next(iter(observations.values())).shape[0]
        stacked = jnp.stack([observations[a].reshape(batch, -1) for a in self._env_agents]).astype(
            jnp.float32
        )
        if not self.provides_action_masks:
            return stacked, None
        avail = jax.vmap(self.env.get_avail_actions)(states)
        return stacked, jnp.stack([avail[a] for a in self._env_agents]).astype(jnp.float32)

    def _step_extras(self, states, rewards, dones, infos):
        """``(rewards (n_agents, B), shaped rewards (n_agents, B) or None, ended (B,))``."""
        import jax.numpy as jnp

        stacked = jnp.stack([rewards[a] for a in self._env_agents]).astype(jnp.float32)
        shaped = None
        if getattr(self, "reports_shaped_reward", False):
            shaped = jnp.stack([infos["shaped_reward"][a] for a in self._env_agents])
            shaped = shaped.astype(jnp.float32)
        return stacked, shaped, dones["__all__"]

    # ---- jax -> numpy, once per batched call ------------------------------------------
    def _fresh(self, chosen: np.ndarray):
        """New episodes' starts for every world (used where ``chosen``), their episode
        numbers advanced: ``(states, packed arrays)``."""
        self._episode[chosen] += 1
        self._t[chosen] = 0
        return self._reset(self._key, self._worlds, self._episode, self._t)

    def _arrays(self, observations, masks, state=None) -> WorldArrays:
        """``(n_agents, B, ...)`` observations and masks (host arrays) as per-agent views."""
        return WorldArrays(
            observations={a: observations[i] for i, a in enumerate(self.agents)},
            action_masks=(
                None if masks is None else {a: masks[i] for i, a in enumerate(self.agents)}
            ),
            state=state,
        )

    def _set_pending_resets(self, arrays: WorldArrays, indices) -> None:
        for i in indices:
            self._pending_reset[int(i)] = (
                self.world_observations(arrays, int(i), self.agents),
                {a: {} for a in self.agents},
            )

    def world_observations(self, arrays: WorldArrays, index: int, agents) -> dict[str, Any]:
        """World ``index``'s observation of each of ``agents`` as its slot hands it out."""
        if arrays.action_masks is None:
            return {a: arrays.observations[a][index] for a in agents}
        return {
            a: {
                OBSERVATION_KEY: arrays.observations[a][index],
                ACTION_MASK_KEY: arrays.action_masks[a][index],
            }
            for a in agents
        }

    def after_reset(self, chosen: np.ndarray) -> None:
        """Bookkeeping of the worlds just reset (SMAX: their units are alive again)."""

    # ---- the array interface (``rollout.ArrayWorld``) and the BatchedWorld one ----------
    def reset_arrays(self, seed: int | None = None) -> WorldArrays:
        """Resets every world (each slot's next ``reset()`` returns its start)."""
        if seed is not None:
            self._key = self.jax.random.PRNGKey(seed)
            self._episode[:] = np.iinfo(np.uint32).max  # the first episode is number 0
        self.states, packed = self._fresh(np.ones(self.num_envs, bool))
        self._current = self._arrays(*self.jax.device_get(packed))
        self.after_reset(np.ones(self.num_envs, bool))
        self._set_pending_resets(self._current, range(self.num_envs))
        return self._current

    def reset(self, seed: int | None = None) -> None:
        self.reset_arrays(seed)

    def reset_worlds(self, indices: Sequence[int]) -> WorldArrays:
        """Resets the worlds ``indices`` in one batched call (each slot's next
        ``reset()`` returns its start); the arrays' rows of those worlds are their
        starts."""
        if self.states is None:  # nothing to keep yet (RLlib's wrapper resets a slot first)
            return self.reset_arrays()
        chosen = np.zeros(self.num_envs, bool)
        chosen[list(indices)] = True
        fresh, packed = self._fresh(chosen)
        self.states = self._replace(chosen, fresh, self.states)
        arrays = self._arrays(*self.jax.device_get(packed))
        self._current = self._current.where(chosen, arrays)
        self.after_reset(chosen)
        self._set_pending_resets(arrays, np.flatnonzero(chosen))
        return arrays

    def shaping_coefficient(self) -> float:
        """The shaped reward's weight now: ``shaped_reward`` annealed linearly to 0 over
        ``shaped_reward_horizon`` env steps (constant without a horizon)."""
        if not self.shaped_reward or self.shaped_reward_horizon is None:
            return self.shaped_reward
        return self.shaped_reward * max(0.0, 1.0 - self.steps_taken / self.shaped_reward_horizon)

    def step_arrays(self, actions: dict[str, np.ndarray]) -> WorldArrays:
        """One step of every world; ``actions[agent]``: ``(B,)``."""
        batch = {
            env_agent: np.asarray(actions[a], np.int32).reshape(self.num_envs)
            for a, env_agent in zip(self.agents, self._env_agents, strict=True)
        }
        self._t += 1
        self.states, packed = self._step(
            self._key, self._worlds, self._episode, self._t, self.states, batch
        )
        observations, masks, rewards, shaped, ended = self.jax.device_get(packed)
        arrays = self._arrays(observations, masks)
        rewards = rewards.astype(np.float64)
        weight = self.shaping_coefficient()
        if shaped is not None and weight:
            rewards = rewards + weight * shaped
        self.steps_taken += self.num_envs
        ended = np.asarray(ended, bool)
        time_limit = (
            ended & (self._t >= self.time_limit)
            if self.time_limit is not None
            else np.zeros_like(ended)
        )
        arrays.rewards = {a: rewards[i] for i, a in enumerate(self.agents)}
        arrays.terminated = ended & ~time_limit
        arrays.truncated = time_limit
        self._current = arrays
        return arrays

    def step(self, actions: Sequence[dict[str, Any]]) -> None:
        if len(actions) != self.num_envs:
            raise ValueError(
                f"got actions for {len(actions)} worlds, the batch has {self.num_envs}"
            )
        # 0 for a world about to be reset (its actions are {})
        batch = {a: np.zeros(self.num_envs, np.int32) for a in self.agents}
        for i, world_actions in enumerate(actions):
            for agent, action in world_actions.items():
                batch[agent][i] = action
        arrays = self.step_arrays(batch)
        self.set_pending_steps(arrays)

    def set_pending_steps(self, arrays: WorldArrays) -> None:
        """Each world's ``(observations, rewards, terminated, truncated, infos)``."""
        for i in range(self.num_envs):
            self._pending_step[i] = (
                self.world_observations(arrays, i, self.agents),
                {a: float(arrays.rewards[a][i]) for a in self.agents},
                {a: bool(arrays.terminated[i]) for a in self.agents},
                {a: bool(arrays.truncated[i]) for a in self.agents},
                {a: {} for a in self.agents},
            )

    def state(self, index: int) -> np.ndarray | None:
        return None

    def frame(self, index: int) -> np.ndarray | None:
        """World ``index`` drawn by JaxMARL's visualiser (Overcooked), else ``None``."""
        return None

    def close(self) -> None:
        self._pending_reset.clear()
        self._pending_step.clear()


class JaxMarlSlot(WorldSlot):
    """World ``index`` of a ``JaxMarlWorld`` as a PettingZoo ParallelEnv."""

    metadata = {"name": "jaxmarl", "is_parallelizable": True, "render_modes": ["rgb_array"]}

    def state(self) -> np.ndarray | None:
        if self.world.states is None:
            self.world.reset()
        return self.world.state(self.index)

    def render(self) -> np.ndarray | None:
        """With ``render_mode="rgb_array"``: the world as JaxMARL's visualiser draws it
        (Overcooked), else ``None``."""
        if self.world.render_mode != "rgb_array" or self.world.states is None:
            return None
        return self.world.frame(self.index)


JaxMarlWorld.slot_class = JaxMarlSlot


class OvercookedWorld(JaxMarlWorld):
    """Overcooked v1 and v2: shaped rewards in the infos, frames from JaxMARL's
    visualisers."""

    reports_shaped_reward = True

    def frame(self, index: int) -> np.ndarray | None:
        state = self.jax.tree_util.tree_map(lambda leaf: leaf[index], self.states)
        if hasattr(state, "maze_map"):  # v1
            from jaxmarl.viz.overcooked_visualizer import TILE_PIXELS, OvercookedVisualizer

            padding = self.env.agent_view_size - 2
            grid = np.asarray(state.maze_map[padding:-padding, padding:-padding, :])
            return np.asarray(
                OvercookedVisualizer._render_grid(
                    grid,
                    tile_size=TILE_PIXELS,
                    highlight_mask=None,
                    agent_dir_idx=np.asarray(state.agent_dir_idx),
                    agent_inv=np.asarray(state.agent_inv),
                ),
                np.uint8,
            )
        from jaxmarl.viz.overcooked_v2_visualizer import OvercookedV2Visualizer

        return np.asarray(OvercookedV2Visualizer()._render_state(state), np.uint8)
