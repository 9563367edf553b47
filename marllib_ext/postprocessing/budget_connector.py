"""Env-to-module connector conditioning every actor on the team budget z (EFXplorer)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.env_to_module.observation_preprocessor import (
    MultiAgentObservationPreprocessor,
)
from ray.rllib.utils.annotations import override

from marllib_ext.errors import ConfigError
from marllib_ext.ops.efx import (
    Z_SAMPLING_MODES,
    BudgetController,
    sample_initial_budget,
)
from marllib_ext.postprocessing.budget_arrays import BudgetArrays, BudgetState, BudgetTracker
from marllib_ext.postprocessing.budget_input import BudgetInput
from marllib_ext.postprocessing.intrinsic_signals import (
    INTRINSIC_REWARD,
    HoldsSignal,
    completed_agent_steps,
    intrinsic_signal,
    observation_dims,
)
from marllib_ext.rollout.episode_blocks import record_after_step


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
            ext_tolerance=getattr(settings, "z_ext_tolerance", 0.0),
        )
        for budget in settings.team_budgets
    }


# Episode custom data written at the episode's first step (copied across chunk cuts).
Z0_KEY = "efx_z0"
DEPLOY_KEY = "efx_deploy"
STATE_KEY = "efx_budget_state"  # the episode's one-world BudgetState
ACCOUNTED_KEY = "efx_steps_accounted"  # {agent: its agent steps counted in the state}


class BudgetObservationConnector(HoldsSignal, MultiAgentObservationPreprocessor):
    """Appends each team's budget ``z_T``, normalized to ``[0, 1]`` over the team's
    range by ``BudgetInput``, to the observations of that team's agents (one team on a
    cooperative env: every agent sees the same z).

    At ``env_t == 0`` the episode is a deployment episode with probability
    ``z_deploy_fraction`` (marked ``custom_data["efx_deploy"]``; such episodes drive the
    outer loop): every team starts at its controller's budget. Otherwise each team's
    ``z_0`` is drawn by ``z_sampling`` (the controller's budget, uniform, or DefMARL's
    30% ``z_low`` / 20% ``z_high`` / 50% uniform mix; the uniform draws start at the
    controller's floor, ``z_low`` unless ``budget_range: tracked``). Each episode keeps
    a one-world ``BudgetState`` in its ``custom_data`` (copied across chunk cuts),
    moved by the same ``BudgetTracker`` as the batched rollout's: every agent step is
    accounted once, when it is complete (the agent observes again, or the episode
    ends), so ``z`` drops by the intrinsic reward of every teammate that acted, also on
    turn-taking envs. (With ``explore=False`` RLlib logs ``logp = 0``, so the
    surprisal budget stays at ``z_0``.) The intrinsic reward of each step comes from
    the signal ``intrinsic_reward`` names (``intrinsic_signals``); a signal the learner
    cannot recompute is recorded as a module output of each agent's step
    (``INTRINSIC_REWARD``, ``episode_blocks.record_after_step``).

    The controllers' state and the signal's (visit counts) live here, so they are part
    of every env runner's state and of checkpoints; RLlib's connector-state sync merges
    the signal's state across runners (``merge_states``).
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
        self.seed = seed
        self.tracker = BudgetTracker(self, sorted(self.team_of))
        self.team_column = {team: k for k, team in enumerate(self.tracker.teams)}
        super().__init__(input_observation_space, input_action_space)

    def build_signal(self):
        """The intrinsic reward signal (``HoldsSignal`` builds it on first use)."""
        agents = self.tracker.agents
        dims = observation_dims(self.input_observation_space, agents)
        return intrinsic_signal(
            self.settings, agents, dims, [list(m) for m in self.tracker.members], self.seed
        )

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

    def account(self, episode) -> BudgetState:
        """The episode's budget state, stepped by every agent step completed since the
        last call (idempotent: each step counts once; on-episode-end callbacks call it
        before RLlib's last connector pass)."""
        state, accounted = episode.custom_data[STATE_KEY], episode.custom_data[ACCOUNTED_KEY]
        logp, rewards, acted, after, stepped = completed_agent_steps(
            episode, self.tracker.agents, accounted
        )
        if stepped:
            intrinsic = self.signal.rewards(logp=logp, next_observations=after, acted=acted)
            self.tracker.step(state, intrinsic=intrinsic, rewards=rewards, acted=acted)
            if self.signal.records_column:
                for i, agent in stepped:
                    record_after_step(episode, INTRINSIC_REWARD, agent, float(intrinsic[0, i]))
        return state

    def log_ended(self, episode, metrics) -> None:
        """The ended episode's sums for the outer loop (``BudgetTracker.log_ended``)."""
        self.tracker.log_ended(self.account(episode), np.zeros(1, int), metrics)

    @override(MultiAgentObservationPreprocessor)
    def preprocess(self, observations: dict[str, Any], episode) -> dict[str, Any]:
        if episode.env_t == 0:
            state = self.tracker.new_state(1)
            self.tracker.start(state, np.zeros(1, int))
            episode.custom_data[STATE_KEY] = state
            episode.custom_data[ACCOUNTED_KEY] = {}
            episode.custom_data[Z0_KEY] = {
                team: float(state.z0[0, k]) for team, k in self.team_column.items()
            }
            episode.custom_data[DEPLOY_KEY] = bool(state.deploy[0])
        else:
            state = self.account(episode)
        return {
            agent_id: self.inputs[team].append_to_observation(
                obs, state.z[0, self.team_column[team]]
            )
            for agent_id, obs in observations.items()
            for team in [self.team_of[agent_id]]
        }

    @override(ConnectorV2)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        state = {"controllers": {team: c.get_state() for team, c in self.controllers.items()}}
        return {**state, **self.signal_state()}

    @override(ConnectorV2)
    def set_state(self, state: dict) -> None:
        states = state.get("controllers", {})
        if "controller" in state:  # checkpoints of one-team runs before per-team budgets
            states = {team: state["controller"] for team in self.controllers}
        for team, controller_state in states.items():
            self.controllers[team].set_state(controller_state)
        self.set_signal_state(state)

    @override(ConnectorV2)
    def merge_states(self, states: list[dict]) -> dict:
        # Every runner holds the same broadcast budgets; any one state is the state.
        # The signal's (visit counts) are each runner's own: merged.
        if not states:
            return {}
        name = getattr(self.settings, "intrinsic_reward", "surprisal")
        return {**states[0], **self.merged_signal_state(states, name)}
