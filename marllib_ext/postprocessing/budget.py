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

from marllib_ext.ops.efx import (
    Z_SAMPLING_MODES,
    BudgetController,
    budget_step,
    sample_initial_budget,
)
from marllib_ext.postprocessing.budget_input import BudgetInput


def budget_controller(settings: Any) -> BudgetController:
    """The outer loop's controller at its initial state, from resolved EFX settings."""
    return BudgetController(
        z=settings.z_init,
        z_low=settings.z_low,
        z_high=settings.z_high,
        lr=settings.lr_z,
        optimizer=settings.z_optimizer,
        ext_scale=settings.z_ext_scale,
    )


# Episode custom data written at the episode's first step (copied across chunk cuts).
Z0_KEY = "efx_z0"
DEPLOY_KEY = "efx_deploy"


class BudgetObservationConnector(MultiAgentObservationPreprocessor):
    """Appends the shared budget ``z_t``, normalized to ``[0, 1]`` by ``BudgetInput``,
    to every agent's observation.

    At ``env_t == 0``, ``z_0`` is the controller's deployment budget with probability
    ``z_deploy_fraction`` (such episodes are marked ``custom_data["efx_deploy"]`` and
    drive the outer loop); otherwise it is drawn by ``z_sampling`` (the controller's
    budget, uniform, or DefMARL's 30% ``z_low`` / 20% ``z_high`` / 50% uniform mix).
    Afterwards ``z_t = clip(z_{t-1} - delta_{t-1}, z_low, z_high)`` with
    ``delta = -intrinsic_coef * sum_i logp_i`` of the agents' last logged log-probs.
    ``z_{t-1}`` is read back from the previous (already augmented) observation, which
    the episode keeps in its lookback buffer across chunk cuts, and the augmented
    observation is written into the episode: the learner sees exactly what the actor
    saw. (With ``explore=False`` RLlib logs ``logp = 0``, so z stays at ``z_0``.)

    The budget controller's state lives here, so it is part of every env runner's
    state and of checkpoints.
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        settings: Any,
        seed: int | None = None,
    ) -> None:
        """``settings``: EFX settings with the budget resolved (``intrinsic_coef``,
        ``z_init``, ``z_low``, ``z_high``, ``lr_z``, ``z_optimizer``, ``z_ext_scale``,
        ``z_sampling``, ``z_deploy_fraction``)."""
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
        self.budget_input = BudgetInput(settings.z_low, settings.z_high)
        self.controller = budget_controller(settings)
        self._rng = np.random.default_rng(seed)
        super().__init__(input_observation_space, input_action_space)

    @property
    def budget(self) -> float:
        return self.controller.z

    def play_fixed(self, z: float) -> None:
        """Every following episode starts at ``z`` (evaluation at a chosen budget)."""
        self.controller.z = float(z)
        self.z_sampling, self.deploy_fraction = "fixed", 1.0

    @override(ConnectorV2)
    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        return gym.spaces.Dict(
            {
                agent_id: BudgetInput.widen(space, name=f"agent {agent_id!r}")
                for agent_id, space in input_observation_space.spaces.items()
            }
        )

    def initial_budget(self, episode) -> float:
        deploy = bool(self._rng.random() < self.deploy_fraction)
        if deploy:
            z0 = self.controller.z
        else:
            z0 = sample_initial_budget(
                self._rng,
                self.z_sampling,
                budget=self.controller.z,
                z_low=self.controller.z_low,
                z_high=self.controller.z_high,
            )
        episode.custom_data[Z0_KEY] = float(z0)
        episode.custom_data[DEPLOY_KEY] = deploy
        return z0

    def next_budget(self, episode, agent_ids) -> float:
        if episode.env_t == 0:
            return self.initial_budget(episode)
        agent_episodes = [episode.agent_episodes[agent_id] for agent_id in agent_ids]
        previous_z = float(self.budget_input.read(agent_episodes[0].get_observations(-2)))
        # Per-agent lookups: MultiAgentEpisode.get_extra_model_outputs(indices=-1)
        # returns {} in continuation chunks (ray 2.60).
        logp_sum = sum(
            float(np.sum(sa.get_extra_model_outputs(key=Columns.ACTION_LOGP, indices=-1)))
            for sa in agent_episodes
        )
        delta = -self.intrinsic_coef * logp_sum
        return budget_step(
            previous_z, delta, z_low=self.controller.z_low, z_high=self.controller.z_high
        )

    @override(MultiAgentObservationPreprocessor)
    def preprocess(self, observations: dict[str, Any], episode) -> dict[str, Any]:
        z = self.next_budget(episode, list(observations))
        return {
            agent_id: self.budget_input.append(obs, z) for agent_id, obs in observations.items()
        }

    @override(ConnectorV2)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        return {"controller": self.controller.get_state()}

    @override(ConnectorV2)
    def set_state(self, state: dict) -> None:
        if "controller" in state:
            self.controller.set_state(state["controller"])

    @override(ConnectorV2)
    def merge_states(self, states: list[dict]) -> dict:
        # Every runner holds the same broadcast budget; any one state is the state.
        return states[0] if states else {}
