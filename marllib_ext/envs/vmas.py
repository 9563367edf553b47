"""VMAS (``vmas:<scenario>``): the vectorized multi-agent simulator on its own batching.

One VMAS ``Environment`` with ``num_envs = num_envs_per_env_runner`` worlds serves an
env runner (``envs.batched``); a single env (evaluation, spaces) is the same with one
world. Observations, rewards and done flags leave torch once per batched step.
Presets are BenchMARL's task settings (``configs/env_presets/vmas.yaml``); env args
override them. Every VMAS scenario here is cooperative: one team.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv

from marllib_ext.configs import ENV_PRESET_DIR, load_yaml
from marllib_ext.envs.arrays import WorldArrays
from marllib_ext.envs.batched import WorldSlot
from marllib_ext.errors import ConfigError, install_hint

# BenchMARL's VMAS task settings (configs/env_presets/vmas.yaml), max_steps included.
VMAS_TASKS: dict[str, dict[str, Any]] = load_yaml(ENV_PRESET_DIR / "vmas.yaml")


def _gymnasium_space(space: Any, agent: str, task: str) -> gym.Space:
    """VMAS's (old ``gym``) Box / Discrete as gymnasium spaces."""
    kind = type(space).__name__
    if kind == "Box":
        return gym.spaces.Box(
            np.asarray(space.low, np.float32), np.asarray(space.high, np.float32), dtype=np.float32
        )
    if kind == "Discrete":
        return gym.spaces.Discrete(int(space.n))
    raise ConfigError(
        f"env 'vmas:{task}': agent {agent!r} has a {kind} space; the vmas family takes Box "
        "observations and Box or Discrete actions"
    )


class VmasWorld:
    """One VMAS ``Environment`` of ``num_envs`` worlds and a PettingZoo slot per world.

    ``step`` and ``reset`` compute every world at once and leave each world's result
    with its slot (``VmasSlot``), which hands it out on its own ``step`` / ``reset``.
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        *,
        continuous_actions: bool = True,
        seed: int | None = None,
        device: str = "cpu",
        **scenario_args: Any,
    ) -> None:
        try:
            import vmas
        except ImportError as e:
            raise ConfigError(f"vmas:{task} needs VMAS: {install_hint('vmas')} ({e})") from e
        if task not in VMAS_TASKS:
            raise ConfigError(f"unknown VMAS task {task!r}; tasks: {sorted(VMAS_TASKS)}")
        args = {**VMAS_TASKS[task], **scenario_args}
        max_steps = args.pop("max_steps")
        # PettingZoo's render_mode, not the scenario's: VMAS renders on request.
        self.render_mode = args.pop("render_mode", None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                self.env = vmas.make_env(
                    task,
                    num_envs=num_envs,
                    device=device,
                    continuous_actions=continuous_actions,
                    max_steps=max_steps,
                    seed=seed,
                    dict_spaces=True,
                    clamp_actions=True,
                    terminated_truncated=True,
                    **args,
                )
            except (TypeError, ValueError, AssertionError) as e:
                raise ConfigError(f"env 'vmas:{task}' rejected {scenario_args}: {e}") from e
        unused = [w for w in caught if "passed but not used by the scenario" in str(w.message)]
        if unused:
            raise ConfigError(f"env 'vmas:{task}': {unused[0].message}")
        self.num_envs = num_envs
        self.agents = [agent.name for agent in self.env.agents]
        self.observation_spaces = {
            a: _gymnasium_space(self.env.observation_space[a], a, task) for a in self.agents
        }
        self.action_spaces = {
            a: _gymnasium_space(self.env.action_space[a], a, task) for a in self.agents
        }
        self.slots = [VmasSlot(self, i) for i in range(num_envs)]
        self._pending_reset: dict[int, tuple[dict, dict]] = {}
        self._pending_step: dict[int, tuple] = {}

    def _observations(self, observations: dict[str, Any]) -> dict[str, np.ndarray]:
        return {a: observations[a].detach().cpu().numpy().astype(np.float32) for a in self.agents}

    def reset(self, seed: int | None = None) -> None:
        self.reset_arrays(seed)

    def _action_batch(self, actions: Sequence[dict[str, Any]]) -> dict[str, Any]:
        import torch

        batch = {}
        for agent in self.agents:
            space = self.action_spaces[agent]
            if isinstance(space, gym.spaces.Box):
                values = np.zeros((self.num_envs, *space.shape), np.float32)
            else:
                values = np.zeros(self.num_envs, np.int64)
            for i, world_actions in enumerate(actions):
                if agent in world_actions:
                    values[i] = world_actions[agent]
            batch[agent] = torch.from_numpy(values)
        return batch

    def step(self, actions: Sequence[dict[str, Any]]) -> None:
        if len(actions) != self.num_envs:
            raise ValueError(
                f"got actions for {len(actions)} worlds, the batch has {self.num_envs}"
            )
        observations, rewards, terminated, truncated, _ = self.env.step(self._action_batch(actions))
        observations = self._observations(observations)
        # Some scenarios (wheel) return [num_envs, 1] rewards.
        rewards = {
            a: rewards[a].detach().cpu().numpy().astype(np.float64).reshape(self.num_envs)
            for a in self.agents
        }
        terminated = terminated.detach().cpu().numpy().astype(bool)
        truncated = truncated.detach().cpu().numpy().astype(bool)
        for i in range(self.num_envs):
            self._pending_step[i] = (
                {a: observations[a][i] for a in self.agents},
                {a: float(rewards[a][i]) for a in self.agents},
                {a: bool(terminated[i]) for a in self.agents},
                {a: bool(truncated[i]) for a in self.agents},
                {a: {} for a in self.agents},
            )

    def close(self) -> None:
        self._pending_reset.clear()
        self._pending_step.clear()

    # ---- the array interface (``rollout.ArrayWorld``): every world at once ----------------
    def reset_arrays(self, seed: int | None = None) -> WorldArrays:
        """Resets every world (each slot's next ``reset()`` returns its start)."""
        if seed is not None:
            self.env.seed(seed)
        observations = self._observations(self.env.reset())
        self._set_pending_resets(observations, range(self.num_envs))
        return WorldArrays(observations)

    def reset_worlds(self, indices: Sequence[int]) -> WorldArrays:
        """Resets the worlds ``indices`` (each slot's next ``reset()`` returns its start):
        all of them in one call, otherwise one by one (``reset_at``). Returns every
        world's arrays afterwards."""
        if len(indices) == self.num_envs:
            observations = self._observations(self.env.reset())
        else:
            for index in indices:
                self.env.reset_at(int(index), return_observations=False)
            (raw,) = self.env.get_from_scenario(
                get_observations=True,
                get_rewards=False,
                get_infos=False,
                get_dones=False,
                dict_agent_names=True,
            )
            observations = self._observations(raw)
        self._set_pending_resets(observations, indices)
        return WorldArrays(observations)

    def _set_pending_resets(self, observations: dict[str, np.ndarray], indices) -> None:
        for index in indices:
            self._pending_reset[int(index)] = (
                {a: observations[a][index] for a in self.agents},
                {a: {} for a in self.agents},
            )

    def step_arrays(self, actions: dict[str, np.ndarray]) -> WorldArrays:
        """One step of every world; ``actions[agent]``: ``(B, ...)``."""
        import torch

        observations, rewards, terminated, truncated, _ = self.env.step(
            {agent: torch.from_numpy(np.asarray(actions[agent])) for agent in self.agents}
        )
        return WorldArrays(
            observations=self._observations(observations),
            rewards={
                a: rewards[a].detach().cpu().numpy().astype(np.float64).reshape(self.num_envs)
                for a in self.agents
            },
            terminated=terminated.detach().cpu().numpy().astype(bool).reshape(self.num_envs),
            truncated=truncated.detach().cpu().numpy().astype(bool).reshape(self.num_envs),
        )


class VmasSlot(WorldSlot):
    """World ``index`` of a ``VmasWorld`` as a PettingZoo ParallelEnv."""

    metadata = {"name": "vmas", "is_parallelizable": True, "render_modes": ["rgb_array"]}

    def render(self):
        """The world's frame (``(700, 700, 3)`` uint8, VMAS's renderer) with
        ``render_mode="rgb_array"``, else ``None``."""
        if self.world.render_mode != "rgb_array":
            return None
        return self.world.env.render(mode="rgb_array", env_index=self.index)


def vmas_env(task: str, **kwargs: Any) -> ParallelEnv:
    """One VMAS world of ``task`` as a PettingZoo ParallelEnv (``kwargs``: the scenario's
    arguments over BenchMARL's preset, ``max_steps``, ``continuous_actions``)."""
    return VmasWorld(task, 1, **kwargs).slots[0]


def vmas_world(task: str, num_envs: int, **kwargs: Any) -> VmasWorld:
    """``num_envs`` VMAS worlds of ``task`` stepped by one batched call."""
    return VmasWorld(task, num_envs, **kwargs)
