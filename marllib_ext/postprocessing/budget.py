"""Env-to-module connector conditioning every actor on the team budget z (EFXplorer)."""

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

from marllib_ext.errors import ConfigError
from marllib_ext.ops.efx import (
    Z_SAMPLING_MODES,
    BudgetController,
    budget_step,
    sample_initial_budget,
)
from marllib_ext.postprocessing.budget_arrays import BudgetArrays
from marllib_ext.postprocessing.budget_input import BudgetInput, plain_observation


def budget_controllers(settings: Any) -> dict[str, BudgetController]:
    """The outer loop's controllers at their initial state, one per team, from
    resolved EFX settings."""
    if not settings.team_budgets:
        raise ValueError("EFX settings reach the budget unresolved (no team_budgets)")
    return {
        budget.team: BudgetController(
            z=budget.z_init,
            z_low=budget.z_low,
            z_high=budget.z_high,
            lr=settings.lr_z,
            optimizer=settings.z_optimizer,
            ext_scale=settings.z_ext_scale,
        )
        for budget in settings.team_budgets
    }


# Episode custom data written at the episode's first step (copied across chunk cuts).
Z0_KEY = "efx_z0"
DEPLOY_KEY = "efx_deploy"


class BudgetObservationConnector(MultiAgentObservationPreprocessor):
    """Appends each team's budget ``z_T``, normalized to ``[0, 1]`` over the team's
    range by ``BudgetInput``, to the observations of that team's agents (one team on a
    cooperative env: every agent sees the same z).

    At ``env_t == 0`` the episode is a deployment episode with probability
    ``z_deploy_fraction`` (marked ``custom_data["efx_deploy"]``; such episodes drive the
    outer loop): every team starts at its controller's budget. Otherwise each team's
    ``z_0`` is drawn by ``z_sampling`` (the controller's budget, uniform, or DefMARL's
    30% ``z_low`` / 20% ``z_high`` / 50% uniform mix; the uniform draws start at the
    controller's floor, ``z_low`` unless ``budget_range: tracked``). Afterwards
    ``z_t = clip(z_{t-1} - delta_{t-1}, z_low, z_high)`` with
    ``delta = -intrinsic_coef * sum_{i in T} logp_i`` of the team's last logged
    log-probs. ``z_{t-1}`` is read back from the team's previous (already augmented)
    observation, which the episode keeps in its lookback buffer across chunk cuts, and
    the augmented observation is written into the episode: the learner sees exactly
    what the actor saw. (With ``explore=False`` RLlib logs ``logp = 0``, so z stays at
    ``z_0``.)

    The controllers' state lives here, so it is part of every env runner's state and
    of checkpoints.
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        settings: Any,
        seed: int | None = None,
    ) -> None:
        """``settings``: EFX settings with the budget resolved (``team_budgets``,
        ``intrinsic_coef``, ``lr_z``, ``z_optimizer``, ``z_ext_scale``, ``z_sampling``,
        ``z_deploy_fraction``)."""
        if settings.z_sampling not in Z_SAMPLING_MODES:
            raise ValueError(
                f"z_sampling must be one of {Z_SAMPLING_MODES}, got {settings.z_sampling!r}"
            )
        self.settings = settings
        self.intrinsic_coef = float(settings.intrinsic_coef)
        self.z_sampling = settings.z_sampling
        self.deploy_fraction = (
            1.0 if settings.z_sampling == "fixed" else float(settings.z_deploy_fraction)
        )
        self.controllers = budget_controllers(settings)
        self.inputs = {b.team: b.input for b in settings.team_budgets}
        self.team_of = {agent: b.team for b in settings.team_budgets for agent in b.agents}
        self._rng = np.random.default_rng(seed)
        super().__init__(input_observation_space, input_action_space)

    @property
    def controller(self) -> BudgetController:
        """The one controller of a one-team env (``--z`` and sweeps choose one budget)."""
        if len(self.controllers) != 1:
            raise ConfigError(
                f"this run has one budget per team ({sorted(self.controllers)}); choosing "
                "one budget z applies to one-team envs only"
            )
        return next(iter(self.controllers.values()))

    @property
    def budget(self) -> float:
        """The deployment budget of a one-team env."""
        return self.controller.z

    @property
    def budgets(self) -> dict[str, float]:
        """Each team's deployment budget."""
        return {team: controller.z for team, controller in self.controllers.items()}

    def play_fixed(self, z: float | None = None) -> None:
        """Every following episode starts at ``z`` (one-team envs), or with ``None`` at
        each team's deployment budget (evaluation)."""
        if z is not None:
            self.controller.z = float(z)
        self.z_sampling, self.deploy_fraction = "fixed", 1.0

    @override(ConnectorV2)
    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        return gym.spaces.Dict(
            {
                agent_id: BudgetInput.widen_observation_space(space, name=f"agent {agent_id!r}")
                for agent_id, space in input_observation_space.spaces.items()
            }
        )

    def initial_budgets(self, episode) -> dict[str, float]:
        deploy, z0 = self.draw_initial_budgets()
        episode.custom_data[Z0_KEY] = z0
        episode.custom_data[DEPLOY_KEY] = deploy
        return z0

    def draw_initial_budgets(self) -> tuple[bool, dict[str, float]]:
        """A new episode's ``(deploy, {team: z_0})``: a deployment episode (probability
        ``z_deploy_fraction``) starts every team at its controller's budget, any other
        draws each team's ``z_0`` by ``z_sampling``."""
        deploy = bool(self._rng.random() < self.deploy_fraction)
        z0 = {
            team: controller.z
            if deploy
            else sample_initial_budget(
                self._rng,
                self.z_sampling,
                budget=controller.z,
                z_low=controller.z_low,
                z_high=controller.z_high,
                floor=controller.floor,
            )
            for team, controller in self.controllers.items()
        }
        return deploy, z0

    def array_form(self, agents: list[str], num_envs: int):
        """This connector on a batched rollout (``rollout.extensions``): each world's
        team budgets as arrays, drawn and stepped as here, from these controllers."""
        return BudgetArrays(self, agents, num_envs)

    def next_budget(self, episode, team: str, agent_ids: list[str]) -> float:
        """``z_T`` at this step from the team's previous z and log-probs.

        ``agent_ids``: the team's agents observing now. Those that acted before (all of
        them on simultaneous-move envs, a dying agent with its final observation
        included) carry the previous z in their last observation and the log-probs of
        the previous step; an agent that just arrived has neither. A team whose agents
        all just arrived starts at its episode's ``z_0``."""
        agent_episodes = [sa for sa in (episode.agent_episodes[a] for a in agent_ids) if sa.t > 0]
        if not agent_episodes:
            return float(episode.custom_data[Z0_KEY][team])
        previous = plain_observation(agent_episodes[0].get_observations(-2))
        previous_z = float(self.inputs[team].read(previous))
        # Per-agent lookups: MultiAgentEpisode.get_extra_model_outputs(indices=-1)
        # returns {} in continuation chunks (ray 2.60).
        logp_sum = sum(
            float(np.sum(sa.get_extra_model_outputs(key=Columns.ACTION_LOGP, indices=-1)))
            for sa in agent_episodes
        )
        controller = self.controllers[team]
        return budget_step(
            previous_z,
            -self.intrinsic_coef * logp_sum,
            z_low=controller.z_low,
            z_high=controller.z_high,
        )

    @override(MultiAgentObservationPreprocessor)
    def preprocess(self, observations: dict[str, Any], episode) -> dict[str, Any]:
        acting: dict[str, list[str]] = {}
        for agent_id in observations:
            acting.setdefault(self.team_of[agent_id], []).append(agent_id)
        if episode.env_t == 0:
            z = self.initial_budgets(episode)
        else:
            z = {team: self.next_budget(episode, team, agents) for team, agents in acting.items()}
        return {
            agent_id: self.inputs[self.team_of[agent_id]].append_to_observation(
                obs, z[self.team_of[agent_id]]
            )
            for agent_id, obs in observations.items()
        }

    @override(ConnectorV2)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        return {"controllers": {team: c.get_state() for team, c in self.controllers.items()}}

    @override(ConnectorV2)
    def set_state(self, state: dict) -> None:
        states = state.get("controllers", {})
        if "controller" in state:  # checkpoints of one-team runs before per-team budgets
            states = {team: state["controller"] for team in self.controllers}
        for team, controller_state in states.items():
            self.controllers[team].set_state(controller_state)

    @override(ConnectorV2)
    def merge_states(self, states: list[dict]) -> dict:
        # Every runner holds the same broadcast budgets; any one state is the state.
        return states[0] if states else {}
