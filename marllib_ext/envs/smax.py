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

from typing import Any

import numpy as np
from pettingzoo.utils.env import ParallelEnv

from marllib_ext.envs.adapter import SUCCESS_KEY
from marllib_ext.envs.arrays import WorldArrays
from marllib_ext.envs.jaxmarl import JaxMarlSlot, JaxMarlWorld
from marllib_ext.errors import ConfigError, install_hint

# SMAC's maps that SMAX re-creates, and SMAX's own (jaxmarl 0.2.0's MAP_NAME_TO_SCENARIO).
SMAX_SCENARIOS = (
    "2s3z", "3m", "3s5z", "3s5z_vs_3s6z", "3s_vs_5z", "5m_vs_6m", "6h_vs_8z", "8m",
    "10m_vs_11m", "25m", "27m_vs_30m", "smacv2_5_units", "smacv2_10_units",
    "smacv2_20_units",
)  # fmt: skip


class SmaxWorld(JaxMarlWorld):
    """``num_envs`` SMAX battles of one scenario and a PettingZoo slot per battle."""

    provides_state = True  # its arrays carry SMAX's world state

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
            from jaxmarl.environments.smax import HeuristicEnemySMAX, map_name_to_scenario
        except ImportError as e:
            raise ConfigError(f"smax:{scenario} needs JaxMARL: {install_hint('smax')} ({e})") from e
        if scenario not in SMAX_SCENARIOS:
            raise ConfigError(f"unknown SMAX scenario {scenario!r}; scenarios: {SMAX_SCENARIOS}")
        try:
            env = HeuristicEnemySMAX(scenario=map_name_to_scenario(scenario), **env_args)
        except TypeError as e:
            raise ConfigError(f"env 'smax:{scenario}' rejected {env_args}: {e}") from e
        self.num_allies = env.num_allies
        self._alive = np.ones((num_envs, len(env.agents)), bool)  # units not yet killed
        self._present_before = self._alive.copy()
        super().__init__(env, num_envs, seed=seed, render_mode=render_mode, name=f"smax:{scenario}")

    # ---- inside jit ---------------------------------------------------------------------
    def _pack(self, observations, states):
        """``(observations (n_agents, B, obs), masks (n_agents, B, n), world state (B, S))``:
        few arrays, so that one host copy moves them."""
        import jax
        import jax.numpy as jnp

        env = self.env
        avail = jax.vmap(env.get_avail_actions)(states)
        return (
            jnp.stack([observations[a] for a in env.agents]).astype(jnp.float32),
            jnp.stack([avail[a] for a in env.agents]).astype(jnp.float32),
            observations["world_state"].astype(jnp.float32),
        )

    def _step_extras(self, states, rewards, dones, infos):
        """``(rewards (n_agents, B), ended (B,), unit_alive (B, units), step (B,))``."""
        import jax.numpy as jnp

        return (
            jnp.stack([rewards[a] for a in self.env.agents]),
            dones["__all__"],
            states.state.unit_alive,
            states.state.step,
        )

    def after_reset(self, chosen: np.ndarray) -> None:
        self._alive[chosen] = True

    def step_arrays(self, actions: dict[str, np.ndarray]) -> WorldArrays:
        """One step of every battle; ``actions[agent]``: ``(B,)`` (ignored for dead units)."""
        batch = {a: np.asarray(actions[a], np.int32).reshape(self.num_envs) for a in self.agents}
        self._t += 1
        self.states, packed = self._step(
            self._key, self._worlds, self._episode, self._t, self.states, batch
        )
        observations, masks, state, rewards, ended, alive, step = self.jax.device_get(packed)
        arrays = self._arrays(observations, masks, state)
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

    def set_pending_steps(self, arrays: WorldArrays) -> None:
        ended = arrays.terminated | arrays.truncated
        for i in range(self.num_envs):
            present = [a for j, a in enumerate(self.agents) if self._present_before[i, j]]
            died = {a for a in present if arrays.died[a][i]}
            infos = {a: {SUCCESS_KEY: bool(arrays.success[i])} if ended[i] else {} for a in present}
            self._pending_step[i] = (
                self.world_observations(arrays, i, present),
                {a: float(arrays.rewards[a][i]) for a in present},
                {a: a in died or bool(arrays.terminated[i]) for a in present},
                {a: bool(arrays.truncated[i]) for a in present},
                infos,
            )

    def state(self, index: int) -> np.ndarray:
        return self._current.state[index]

    def frame(self, index: int) -> np.ndarray:
        state = self.states.state
        env = self.env
        return battle_frame(
            np.asarray(state.unit_positions[index]),
            np.asarray(state.unit_alive[index]),
            np.asarray(state.unit_teams[index]),
            np.asarray(state.unit_health[index])
            / np.asarray(env.unit_type_health)[np.asarray(state.unit_types[index])],
            (float(env.map_width), float(env.map_height)),
        )


class SmaxSlot(JaxMarlSlot):
    """Battle ``index`` of a ``SmaxWorld`` as a PettingZoo ParallelEnv (dead units leave
    ``agents``), with SMAX's world state; ``render`` draws the battle's units on the
    map (``battle_frame``)."""

    metadata = {"name": "smax", "is_parallelizable": True, "render_modes": ["rgb_array"]}


SmaxWorld.slot_class = SmaxSlot


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
