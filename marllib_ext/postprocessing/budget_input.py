"""Where the EFX budget z sits in a network input and how it is scaled.

The one place that knows this layout: the budget is the last entry of every actor's
observation (and of the joint critic's state), normalized to ``[0, 1]`` over
``[z_low, z_high]``. The env-to-module connector writes it, the learner connector and
evaluation read it back; nothing else indexes into observations for z.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from marllib_ext.envs.adapter import OBSERVATION_KEY, has_action_mask
from marllib_ext.policies.joint_critic import team_critic_ids


def plain_observation(observation):
    """An agent's observation without its action mask (unchanged when it has none)."""
    return observation[OBSERVATION_KEY] if isinstance(observation, dict) else observation


@dataclass(frozen=True)
class BudgetInput:
    """``u = (z - z_low) / (z_high - z_low)`` appended as the last input column.

    An empty range (``z_low == z_high``) feeds ``u = 0`` and reads back ``z_low``.
    """

    z_low: float
    z_high: float

    def __post_init__(self) -> None:
        if self.z_low > self.z_high:
            raise ValueError(f"z_low={self.z_low} must not exceed z_high={self.z_high}")

    @property
    def z_range(self) -> float:
        return self.z_high - self.z_low

    def normalize(self, z: npt.ArrayLike) -> np.ndarray:
        """Raw budget -> ``[0, 1]``."""
        z = np.asarray(z, dtype=np.float64)
        if self.z_range <= 0:
            return np.zeros_like(z)
        return np.clip((z - self.z_low) / self.z_range, 0.0, 1.0)

    def denormalize(self, u: npt.ArrayLike) -> np.ndarray:
        """``[0, 1]`` -> raw budget."""
        return self.z_low + np.asarray(u, dtype=np.float64) * self.z_range

    def append(self, inputs: npt.ArrayLike, z: npt.ArrayLike) -> np.ndarray:
        """``inputs`` ``(..., d)`` with the normalized ``z`` (scalar or ``(...,)``) as
        column ``d``; float32."""
        inputs = np.asarray(inputs, dtype=np.float32)
        u = np.broadcast_to(self.normalize(z), inputs.shape[:-1]).astype(np.float32)
        return np.concatenate([inputs, u[..., None]], axis=-1)

    def append_to_observation(self, observation, z: float):
        """:meth:`append` on an agent's observation; a masked observation gets z in its
        ``observation`` part and keeps its ``action_mask``."""
        if isinstance(observation, dict):
            return {**observation, OBSERVATION_KEY: self.append(observation[OBSERVATION_KEY], z)}
        return self.append(observation, z)

    def read(self, inputs: npt.ArrayLike) -> np.ndarray:
        """The raw budget ``(...,)`` carried by inputs written with :meth:`append`."""
        return self.denormalize(np.asarray(inputs)[..., -1])

    def read_normalized(self, inputs: npt.ArrayLike) -> np.ndarray:
        """The network's view of the budget, ``(...,)`` in ``[0, 1]``."""
        return np.asarray(inputs, dtype=np.float64)[..., -1]

    @staticmethod
    def widen(space: gym.spaces.Box, *, name: str) -> gym.spaces.Box:
        """The observation space with the ``[0, 1]`` budget column appended."""
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(
                f"EFX budget conditioning needs flat Box observations; {name} has {space}"
            )
        return gym.spaces.Box(
            np.append(space.low, 0.0).astype(np.float32),
            np.append(space.high, 1.0).astype(np.float32),
            dtype=np.float32,
        )

    @staticmethod
    def widen_observation_space(space: gym.Space, *, name: str) -> gym.Space:
        """:meth:`widen`; a masked observation space widens its ``observation`` part."""
        if has_action_mask(space):
            return gym.spaces.Dict(
                {
                    **space.spaces,
                    OBSERVATION_KEY: BudgetInput.widen(space[OBSERVATION_KEY], name=name),
                }
            )
        return BudgetInput.widen(space, name=name)

    @staticmethod
    def extra_inputs() -> int:
        """Columns the budget adds to a network input."""
        return 1


@dataclass(frozen=True)
class TeamBudget:
    """One team's budget: its agents and its resolved range ``[z_low, z_high]``.

    On a mixed env every team has its own budget ``z_T``: ``z_T`` decays by the team's
    own intrinsic reward ``-c * sum_{i in T} log pi_i``, only ``T``'s agents (and
    ``T``'s joint critic) see it, and ``Z_max`` counts ``T``'s agents only.
    """

    team: str
    agents: tuple[str, ...]
    z_low: float
    z_high: float
    z_init: float

    @property
    def input(self) -> BudgetInput:
        return BudgetInput(self.z_low, self.z_high)


def team_of_critic(team_budgets: tuple[TeamBudget, ...], critic_module_id: str) -> TeamBudget:
    """The budget served by joint critic ``critic_module_id`` (``joint_critic`` on a
    one-team env, ``joint_critic_<team>`` on a mixed one)."""
    critic_ids = team_critic_ids(budget.team for budget in team_budgets)
    for budget in team_budgets:
        if critic_ids[budget.team] == critic_module_id:
            return budget
    raise ValueError(
        f"no team budget for critic {critic_module_id!r}; teams: "
        f"{[budget.team for budget in team_budgets]} (settings not resolved for this env?)"
    )
