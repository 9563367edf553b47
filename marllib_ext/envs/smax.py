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

import functools
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY, SUCCESS_KEY
from marllib_ext.envs.arrays import WorldArrays
from marllib_ext.envs.batched import WorldSlot
from marllib_ext.errors import ConfigError, install_hint

# SMAC's maps that SMAX re-creates, and SMAX's own (jaxmarl 0.2.0's MAP_NAME_TO_SCENARIO).
SMAX_SCENARIOS = (
    "2s3z", "3m", "3s5z", "3s5z_vs_3s6z", "3s_vs_5z", "5m_vs_6m", "6h_vs_8z", "8m",
    "10m_vs_11m", "25m", "27m_vs_30m", "smacv2_5_units", "smacv2_10_units",
    "smacv2_20_units",
)  # fmt: skip


class SmaxWorld:
    """``num_envs`` SMAX battles of one scenario and a PettingZoo slot per battle."""

    provides_state = True  # its arrays carry SMAX's world state
    provides_action_masks = True

    def __init__(
        self,
        scenario: str,
        num_envs: int,
        *,
        seed: int | None = None,
        render_mode: str | None = None,
        **env_args: Any,
    ) -> None:
        try:
            import jax
            from jaxmarl.environments.smax import HeuristicEnemySMAX, map_name_to_scenario
        except ImportError as e:
            raise ConfigError(f"smax:{scenario} needs JaxMARL: {install_hint('smax')} ({e})") from e
        if scenario not in SMAX_SCENARIOS:
            raise ConfigError(f"unknown SMAX scenario {scenario!r}; scenarios: {SMAX_SCENARIOS}")
        try:
            self.env = HeuristicEnemySMAX(scenario=map_name_to_scenario(scenario), **env_args)
        except TypeError as e:
            raise ConfigError(f"env 'smax:{scenario}' rejected {env_args}: {e}") from e
        self.jax = jax
        self.render_mode = render_mode
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
        # Each battle's randomness depends on its own history only: (battle, episode,
        # step) folded into the seed's key, so both sampling paths and any order of
        # resets replay a seed alike.
        self._key = jax.random.PRNGKey(0 if seed is None else seed)
        self._episode = np.zeros(num_envs, np.uint32)
        self._t = np.zeros(num_envs, np.uint32)
        # One compiled call per reset and per step: keys, simulation, available actions.
        self._reset = jax.jit(functools.partial(_reset_battles, self.env))
        self._step = jax.jit(functools.partial(_step_battles, self.env))
        self._replace = jax.jit(_replace_where)
        self._worlds = np.arange(num_envs, dtype=np.uint32)
        self.states = None
        self.slots = [SmaxSlot(self, i) for i in range(num_envs)]
        self._pending_reset: dict[int, tuple[dict, dict]] = {}
        self._pending_step: dict[int, tuple] = {}
        self._current: WorldArrays | None = None
        self._alive = np.ones((num_envs, len(self.agents)), bool)  # units not yet killed
        self._present_before = self._alive.copy()

    # ---- jax -> numpy, once per batched call ------------------------------------------
    def _fresh(self, chosen: np.ndarray):
        """New episodes' starts for every battle (used where ``chosen``), their episode
        numbers advanced: ``(states, packed arrays)`` (``_pack``)."""
        self._episode[chosen] += 1
        self._t[chosen] = 0
        return self._reset(self._key, self._worlds, self._episode, self._t)

    def _arrays(self, observations, state, masks) -> WorldArrays:
        """``(n_agents, B, ...)`` observations and masks and the ``(B, S)`` state (host
        arrays) as per-agent views."""
        return WorldArrays(
            observations={a: observations[i] for i, a in enumerate(self.agents)},
            action_masks={a: masks[i] for i, a in enumerate(self.agents)},
            state=state,
        )

    def _set_pending_resets(self, arrays: WorldArrays, indices) -> None:
        for i in indices:
            self._pending_reset[int(i)] = (
                _world_observations(arrays, int(i), self.agents),
                {a: {} for a in self.agents},
            )

    # ---- the array interface (``rollout.ArrayWorld``) and the BatchedWorld one ----------
    def reset_arrays(self, seed: int | None = None) -> WorldArrays:
        """Resets every battle (each slot's next ``reset()`` returns its start)."""
        if seed is not None:
            self._key = self.jax.random.PRNGKey(seed)
            self._episode[:] = np.iinfo(np.uint32).max  # the first episode is number 0
        self.states, packed = self._fresh(np.ones(self.num_envs, bool))
        self._current = self._arrays(*self.jax.device_get(packed))
        self._alive[:] = True
        self._set_pending_resets(self._current, range(self.num_envs))
        return self._current

    def reset(self, seed: int | None = None) -> None:
        self.reset_arrays(seed)

    def reset_worlds(self, indices: Sequence[int]) -> WorldArrays:
        """Resets the battles ``indices`` in one batched call (each slot's next
        ``reset()`` returns its start); the arrays' rows of those battles are their
        starts."""
        if self.states is None:  # nothing to keep yet (RLlib's wrapper resets a slot first)
            return self.reset_arrays()
        chosen = np.zeros(self.num_envs, bool)
        chosen[list(indices)] = True
        fresh, packed = self._fresh(chosen)
        self.states = self._replace(chosen, fresh, self.states)
        arrays = self._arrays(*self.jax.device_get(packed))
        self._current = self._current.where(chosen, arrays)
        self._alive[chosen] = True
        self._set_pending_resets(arrays, np.flatnonzero(chosen))
        return arrays

    def step_arrays(self, actions: dict[str, np.ndarray]) -> WorldArrays:
        """One step of every battle; ``actions[agent]``: ``(B,)`` (ignored for dead units)."""
        batch = {a: np.asarray(actions[a], np.int32).reshape(self.num_envs) for a in self.agents}
        self._t += 1
        self.states, packed = self._step(
            self._key, self._worlds, self._episode, self._t, self.states, batch
        )
        observations, state, masks, rewards, ended, alive, step = self.jax.device_get(packed)
        arrays = self._arrays(observations, state, masks)
        won = ~alive[:, self.num_allies :].any(axis=1)
        lost = ~alive[:, : self.num_allies].any(axis=1)
        time_limit = ended & ~(won | lost) & (step >= self.env.max_steps)
        arrays.rewards = {a: rewards[i].astype(np.float64) for i, a in enumerate(self.agents)}
        arrays.terminated = ended & ~time_limit
        arrays.truncated = time_limit
        arrays.success = won & ended
        was_alive = self._alive.copy()
        # Units killed while their battle goes on (at the end every unit ends with it).
        arrays.died = {
            a: was_alive[:, j] & ~alive[:, j] & ~ended for j, a in enumerate(self.agents)
        }
        self._alive = was_alive & alive[:, : self.num_allies]
        self._present_before = was_alive
        self._current = arrays
        return arrays

    def step(self, actions: Sequence[dict[str, Any]]) -> None:
        if len(actions) != self.num_envs:
            raise ValueError(
                f"got actions for {len(actions)} battles, the batch has {self.num_envs}"
            )
        batch = {a: np.zeros(self.num_envs, np.int32) for a in self.agents}  # 0: no-op
        for i, world_actions in enumerate(actions):
            for agent, action in world_actions.items():
                batch[agent][i] = action
        arrays = self.step_arrays(batch)
        ended = arrays.terminated | arrays.truncated
        for i in range(self.num_envs):
            present = [a for j, a in enumerate(self.agents) if self._present_before[i, j]]
            died = {a for a in present if arrays.died[a][i]}
            infos = {a: {SUCCESS_KEY: bool(arrays.success[i])} if ended[i] else {} for a in present}
            self._pending_step[i] = (
                _world_observations(arrays, i, present),
                {a: float(arrays.rewards[a][i]) for a in present},
                {a: a in died or bool(arrays.terminated[i]) for a in present},
                {a: bool(arrays.truncated[i]) for a in present},
                infos,
            )

    def state(self, index: int) -> np.ndarray:
        return self._current.state[index]

    def close(self) -> None:
        self._pending_reset.clear()
        self._pending_step.clear()


def _world_observations(arrays: WorldArrays, index: int, agents) -> dict[str, Any]:
    return {
        a: {
            OBSERVATION_KEY: arrays.observations[a][index],
            ACTION_MASK_KEY: arrays.action_masks[a][index],
        }
        for a in agents
    }


def _keys(key, worlds, episodes, ticks):
    """Every battle's key: its index, episode number and step (0: its reset) folded
    into ``key``."""
    import jax

    return jax.vmap(_battle_key, in_axes=(None, 0, 0, 0))(key, worlds, episodes, ticks)


def _pack(env, observations, states):
    """``(observations (n_agents, B, obs), world state (B, S), masks (n_agents, B, n))``:
    few arrays, so that one host copy moves them."""
    import jax
    import jax.numpy as jnp

    avail = jax.vmap(env.get_avail_actions)(states)
    return (
        jnp.stack([observations[a] for a in env.agents]).astype(jnp.float32),
        observations["world_state"].astype(jnp.float32),
        jnp.stack([avail[a] for a in env.agents]).astype(jnp.float32),
    )


def _reset_battles(env, key, worlds, episodes, ticks):
    import jax

    observations, states = jax.vmap(env.reset)(_keys(key, worlds, episodes, ticks))
    return states, _pack(env, observations, states)


def _step_battles(env, key, worlds, episodes, ticks, states, actions):
    import jax
    import jax.numpy as jnp

    keys = _keys(key, worlds, episodes, ticks)
    observations, states, rewards, dones, _ = jax.vmap(env.step_env)(keys, states, actions)
    packed = (
        *_pack(env, observations, states),
        jnp.stack([rewards[a] for a in env.agents]),
        dones["__all__"],
        states.state.unit_alive,
        states.state.step,
    )
    return states, packed


def _battle_key(key, world, episode, tick):
    """``key`` with a battle's index, episode number and step (0: its reset) folded in."""
    import jax

    return jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, world), episode), tick)


def _replace_where(chosen, fresh, old):
    """``fresh`` where ``chosen`` (per battle), ``old`` elsewhere, leaf by leaf."""
    import jax
    import jax.numpy as jnp

    def pick(new, previous):
        mask = chosen.reshape((-1,) + (1,) * (new.ndim - 1))
        return jnp.where(mask, new, previous)

    return jax.tree_util.tree_map(pick, fresh, old)


class SmaxSlot(WorldSlot):
    """Battle ``index`` of a ``SmaxWorld`` as a PettingZoo ParallelEnv (dead units leave
    ``agents``), with SMAX's world state."""

    metadata = {"name": "smax", "is_parallelizable": True, "render_modes": ["rgb_array"]}

    def state(self) -> np.ndarray:
        if self.world.states is None:
            self.world.reset()
        return self.world.state(self.index)

    def render(self) -> np.ndarray | None:
        """With ``render_mode="rgb_array"``: the battle's units on the map
        (``battle_frame``), else ``None``."""
        if self.world.render_mode != "rgb_array" or self.world.states is None:
            return None
        state = self.world.states.state
        env = self.world.env
        return battle_frame(
            np.asarray(state.unit_positions[self.index]),
            np.asarray(state.unit_alive[self.index]),
            np.asarray(state.unit_teams[self.index]),
            np.asarray(state.unit_health[self.index])
            / np.asarray(env.unit_type_health)[np.asarray(state.unit_types[self.index])],
            (float(env.map_width), float(env.map_height)),
        )


def battle_frame(positions, alive, teams, health, map_size, pixels: int = 400) -> np.ndarray:
    """``(pixels, pixels, 3)`` uint8: the living units at their ``(x, y)`` positions on
    the ``map_size`` map, allies (team 0) blue and enemies red, each dot's area its
    health fraction."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(4, 4), dpi=pixels / 4)
    FigureCanvasAgg(figure)
    axis = figure.add_subplot()
    for team, color in ((0, "tab:blue"), (1, "tab:red")):
        here = alive & (teams == team)
        axis.scatter(positions[here, 0], positions[here, 1], s=30 + 170 * health[here], c=color)
    axis.set_xlim(0, map_size[0])
    axis.set_ylim(0, map_size[1])
    axis.set_xticks([])
    axis.set_yticks([])
    figure.tight_layout()
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()


def smax_env(scenario: str, **kwargs: Any) -> ParallelEnv:
    """One SMAX battle of ``scenario`` as a PettingZoo ParallelEnv (``kwargs``:
    ``HeuristicEnemySMAX`` / ``SMAX`` arguments, e.g. ``max_steps``, ``attack_mode``)."""
    return SmaxWorld(scenario, 1, **kwargs).slots[0]


def smax_world(scenario: str, num_envs: int, **kwargs: Any) -> SmaxWorld:
    """``num_envs`` SMAX battles of ``scenario`` stepped by one batched call."""
    return SmaxWorld(scenario, num_envs, **kwargs)
