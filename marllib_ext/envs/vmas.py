"""VMAS (``vmas:<scenario>``): the vectorized multi-agent simulator on its own batching.

One VMAS ``Environment`` with ``num_envs = num_envs_per_env_runner`` worlds serves an
env runner (``envs.batched``); a single env (evaluation, spaces) is the same with one
world. Observations, rewards and done flags leave torch once per batched step.
Presets are BenchMARL's task settings (``benchmarl/conf/task/vmas/<task>.yaml``);
env args override them. Every VMAS scenario here is cooperative: one team.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv

from marllib_ext.errors import ConfigError

# BenchMARL's VMAS task settings (max_steps included); the scenario's own defaults
# for the rest.
VMAS_TASKS: dict[str, dict[str, Any]] = {
    "balance": dict(max_steps=100, n_agents=4, random_package_pos_on_line=True, package_mass=5),
    "ball_passage": dict(max_steps=500, n_passages=1, fixed_passage=False, random_start_angle=True),
    "ball_trajectory": dict(max_steps=100, joints=True),
    "buzz_wire": dict(max_steps=100, random_start_angle=True, collision_reward=-10),
    "discovery": dict(
        max_steps=100,
        n_agents=5,
        n_targets=7,
        lidar_range=0.35,
        covering_range=0.25,
        agents_per_target=2,
        targets_respawn=True,
        shared_reward=True,
    ),
    "dispersion": dict(
        max_steps=100,
        n_agents=4,
        n_food=4,
        share_reward=True,
        food_radius=0.02,
        penalise_by_time=False,
    ),  # fmt: skip
    "dropout": dict(max_steps=100, n_agents=4, energy_coeff=0.02, start_same_point=False),
    "flocking": dict(max_steps=100, n_agents=4, n_obstacles=5, collision_reward=-0.2),
    # BenchMARL plays 1 v 1, which VMAS 1.5.2's football fails to build (torch.cat of an
    # empty list); 2 v 2 with the same settings.
    "football": dict(
        max_steps=500,
        n_blue_agents=2,
        n_red_agents=2,
        disable_ai_red=True,
        ball_mass=0.25,
    ),  # fmt: skip
    "give_way": dict(
        max_steps=100,
        mirror_passage=False,
        observe_rel_pos=False,
        done_on_completion=False,
        final_reward=0.01,
    ),  # fmt: skip
    "joint_passage": dict(
        max_steps=500,
        n_passages=1,
        fixed_passage=True,
        joint_length=0.5,
        random_start_angle=True,
        random_goal_angle=True,
        observe_joint_angle=False,
        asym_package=True,
        mass_ratio=5,
        mass_position=0.75,
    ),  # fmt: skip
    "joint_passage_size": dict(
        max_steps=500,
        n_passages=3,
        fixed_passage=False,
        random_start_angle=False,
        random_goal_angle=False,
        observe_joint_angle=False,
    ),  # fmt: skip
    "multi_give_way": dict(max_steps=200, agent_collision_penalty=-0.1),
    "navigation": dict(
        max_steps=100,
        n_agents=3,
        collisions=True,
        agents_with_same_goal=1,
        split_goals=False,
        observe_all_goals=False,
        shared_rew=False,
        lidar_range=0.35,
        agent_radius=0.1,
    ),  # fmt: skip
    "passage": dict(max_steps=500, n_passages=1, shared_reward=True),
    "reverse_transport": dict(
        max_steps=100, n_agents=4, package_width=0.6, package_length=0.6, package_mass=50
    ),
    "sampling": dict(
        max_steps=100,
        n_agents=3,
        shared_rew=False,
        n_gaussians=3,
        lidar_range=0.2,
        cov=0.05,
        collisions=True,
        spawn_same_pos=False,
    ),  # fmt: skip
    "transport": dict(
        max_steps=100,
        n_agents=4,
        n_packages=1,
        package_width=0.15,
        package_length=0.15,
        package_mass=50,
    ),  # fmt: skip
    "wheel": dict(max_steps=100, n_agents=4, line_length=1, line_mass=30, desired_velocity=0.05),
    "wind_flocking": dict(
        max_steps=100,
        horizon=100,
        dist_shaping_factor=1,
        vel_shaping_factor=1,
        wind_shaping_factor=1,
        rot_shaping_factor=0,
        pos_shaping_factor=0,
        energy_shaping_factor=0,
        wind=0,
        cover_angle_tolerance=1,
        observe_rel_pos=True,
        observe_rel_vel=True,
        observe_pos=False,
        desired_vel=0.4,
    ),  # fmt: skip
}


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
            raise ConfigError(f'vmas:{task} needs VMAS: pip install -e ".[vmas]" ({e})') from e
        if task not in VMAS_TASKS:
            raise ConfigError(f"unknown VMAS task {task!r}; tasks: {sorted(VMAS_TASKS)}")
        args = {**VMAS_TASKS[task], **scenario_args}
        max_steps = args.pop("max_steps")
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
        self.task = task
        self.num_envs = num_envs
        self.max_steps = max_steps
        self.continuous_actions = continuous_actions
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
        if seed is not None:
            self.env.seed(seed)
        batch = self._observations(self.env.reset())
        self._pending_reset = {
            i: ({a: batch[a][i] for a in self.agents}, {a: {} for a in self.agents})
            for i in range(self.num_envs)
        }

    def reset_world(self, index: int) -> None:
        batch = self._observations(self.env.reset_at(index))
        self._pending_reset[index] = (
            {a: batch[a][index] for a in self.agents},
            {a: {} for a in self.agents},
        )

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


class VmasSlot(ParallelEnv):
    """World ``index`` of a ``VmasWorld`` as a PettingZoo ParallelEnv.

    In a batch it returns what the world's batched call left for it; a slot of a
    one-world ``VmasWorld`` steps and resets the world itself (a single env).
    """

    metadata = {"name": "vmas", "is_parallelizable": True}

    def __init__(self, world: VmasWorld, index: int) -> None:
        self.world = world
        self.index = index
        self.possible_agents = list(world.agents)
        self.agents = list(world.agents)

    def observation_space(self, agent: str) -> gym.Space:
        return self.world.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self.world.action_spaces[agent]

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
                    f"world {self.index} of a batch of {self.world.num_envs} VMAS worlds "
                    "steps only with the batch (BatchedVectorEnv.step)"
                )
            self.world.step([actions])
        result = self.world._pending_step.pop(self.index)
        if any(result[2].values()) or any(result[3].values()):
            self.agents = []
        return result

    def close(self) -> None:
        self.world.close()


def vmas_env(task: str, **kwargs: Any) -> ParallelEnv:
    """One VMAS world of ``task`` as a PettingZoo ParallelEnv (``kwargs``: the scenario's
    arguments over BenchMARL's preset, ``max_steps``, ``continuous_actions``)."""
    return VmasWorld(task, 1, **kwargs).slots[0]


def vmas_world(task: str, num_envs: int, **kwargs: Any) -> VmasWorld:
    """``num_envs`` VMAS worlds of ``task`` stepped by one batched call."""
    return VmasWorld(task, num_envs, **kwargs)
