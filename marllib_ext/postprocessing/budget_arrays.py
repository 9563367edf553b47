"""EFX's team budgets through episodes (``BudgetTracker``, float64, one implementation
for the batched rollout and the per-world connector), the connector's array form
(``BudgetArrays``) and the episode sums both log for the outer loop."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from marllib_ext.envs.arrays import WorldArrays
from marllib_ext.ops.efx import budget_step
from marllib_ext.postprocessing.intrinsic_signals import INTRINSIC_REWARD

# Per-iteration sums logged by env runners where an episode ends.
TEAM_EXTRINSIC_RETURN_SUM = "efx_team_extrinsic_return_sum"
TEAM_INTRINSIC_RETURN_SUM = "efx_team_intrinsic_return_sum"
EPISODES_DONE = "efx_episodes_done"
# The same for the episodes played at the controller's (deployment) budget.
DEPLOY_EXTRINSIC_RETURN_SUM = "efx_deploy_extrinsic_return_sum"
DEPLOY_INTRINSIC_RETURN_SUM = "efx_deploy_intrinsic_return_sum"
DEPLOY_EPISODES_DONE = "efx_deploy_episodes_done"
# Per team: the intrinsic return of episodes started at z_low (budget_range: tracked).
LOW_INTRINSIC_RETURN_SUM = "efx_low_intrinsic_return_sum"
LOW_EPISODES_DONE = "efx_low_episodes_done"
# ... and of episodes started at z_high: how far the budget moves behaviour (the knob).
HIGH_INTRINSIC_RETURN_SUM = "efx_high_intrinsic_return_sum"
HIGH_EPISODES_DONE = "efx_high_episodes_done"
# Smoothed over the last 100 episodes, for display.
TEAM_INTRINSIC_RETURN_MEAN = "efx_team_intrinsic_return_mean"
INTRINSIC_MEAN_WINDOW = 100
# Per-team sums of the deployment episodes, under env_runners/<PER_TEAM>/<team>/.
PER_TEAM = "efx_per_team"


@dataclass
class BudgetState:
    """The team budgets and episode sums of ``B`` worlds (float64 throughout): ``z``,
    ``z0`` ``(B, n_teams)`` each team's budget now and at its episode's start;
    ``deploy`` ``(B,)`` the episode plays the deployment budget; ``returns``,
    ``intrinsic`` ``(B, n_agents)`` each agent's extrinsic and intrinsic return so far."""

    z: np.ndarray
    z0: np.ndarray
    deploy: np.ndarray
    returns: np.ndarray
    intrinsic: np.ndarray


class BudgetTracker:
    """EFX's team budgets through episodes, the one implementation for both layouts:
    the batched rollout keeps one ``BudgetState`` of all its worlds (``BudgetArrays``),
    the per-world connector one of one world per episode (``budget.BudgetObservationConnector``).

    A new episode draws ``(deploy, z_0)`` from the connector (its controllers, sampling
    mode and random generator); after each step ``z <- clip(z - delta, z_low, z_high)``
    with ``delta = sum_{i in team, acted} r_int_i``, the connector's intrinsic signal
    (``intrinsic_signals``; seed 000's ``-intrinsic_coef * log pi_i`` by default); each agent's
    observation gets its team's normalized z appended (``BudgetInput``), so the learner
    reads back what the actor saw. Where an episode ends, its sums are logged for the
    outer loop (``log_episode_sums``)."""

    def __init__(self, connector, agents: list[str]) -> None:
        self.connector = connector
        budgets = connector.settings.team_budgets
        team_index = {agent: k for k, budget in enumerate(budgets) for agent in budget.agents}
        unknown = [agent for agent in agents if agent not in team_index]
        if unknown:
            raise ValueError(f"agents {unknown} belong to no EFX team budget")
        self.agents = list(agents)
        self.teams = [budget.team for budget in budgets]
        self.inputs = [budget.input for budget in budgets]
        self.members = [
            np.array([i for i, agent in enumerate(agents) if team_index[agent] == k], int)
            for k in range(len(budgets))
        ]
        self.team_of_agent = [team_index[agent] for agent in agents]

    def new_state(self, num_envs: int) -> BudgetState:
        teams, agents = (num_envs, len(self.teams)), (num_envs, len(self.agents))
        return BudgetState(
            z=np.zeros(teams), z0=np.zeros(teams), deploy=np.zeros(num_envs, bool),
            returns=np.zeros(agents), intrinsic=np.zeros(agents),
        )  # fmt: skip

    def start(self, state: BudgetState, worlds: np.ndarray) -> None:
        """New episodes begin in ``worlds``: draw their budgets, clear their sums."""
        for world in worlds:
            deploy, z0 = self.connector.draw_initial_budgets()
            state.deploy[world] = deploy
            state.z0[world] = [z0[team] for team in self.teams]
        state.z[worlds] = state.z0[worlds]
        state.returns[worlds] = 0.0
        state.intrinsic[worlds] = 0.0

    def step(self, state: BudgetState, *, intrinsic, rewards, acted) -> None:
        """One step of every world: ``intrinsic`` (each agent's ``r_int``), ``rewards``,
        ``acted`` ``(B, n_agents)`` (the agents that acted; the others' entries are
        ignored)."""
        intrinsic = np.where(acted, intrinsic, 0.0)
        state.intrinsic += intrinsic
        state.returns += np.where(acted, rewards, 0.0)
        for k, team in enumerate(self.teams):
            controller = self.connector.controllers[team]
            delta = intrinsic[:, self.members[k]].sum(axis=1)
            state.z[:, k] = budget_step(
                state.z[:, k], delta, z_low=controller.z_low, z_high=controller.z_high
            )

    def observations(self, state: BudgetState, observations: dict[str, np.ndarray]) -> dict:
        """``{agent: (B, d + 1)}``: each agent's observations with its team's z."""
        return {
            agent: self.inputs[k].append(observations[agent], state.z[:, k])
            for agent, k in zip(self.agents, self.team_of_agent, strict=True)
            if agent in observations
        }

    def log_ended(self, state: BudgetState, worlds: np.ndarray, metrics) -> None:
        """The sums of the episodes that ended in ``worlds``."""
        log_episode_sums(
            metrics,
            budgets=self.connector.settings.team_budgets,
            agents=self.agents,
            returns=state.returns[worlds],
            intrinsic=state.intrinsic[worlds],
            deploy=state.deploy[worlds],
            z0=state.z0[worlds],
        )


class BudgetArrays:
    """``BudgetObservationConnector``'s array form (a ``rollout.extensions``
    ``ObservationExtension``): one ``BudgetState`` of every world of a batched rollout,
    moved by the connector's ``BudgetTracker``."""

    def __init__(self, connector, agents: list[str], num_envs: int) -> None:
        self.tracker = BudgetTracker(connector, agents)
        self.state = self.tracker.new_state(num_envs)
        self.inputs = self.tracker.inputs

    @property
    def z0(self) -> np.ndarray:
        return self.state.z0

    def start(self, worlds: np.ndarray) -> None:
        self.tracker.start(self.state, worlds)

    def extend(self, arrays: WorldArrays) -> WorldArrays:
        observations = self.tracker.observations(self.state, arrays.observations)
        return dataclasses.replace(arrays, observations=observations)

    def step(self, *, logp, rewards, acted, ended, metrics, observations):
        """One step (``ObservationExtension.step``); returns the intrinsic reward
        column of every agent where the signal records one (``None`` otherwise)."""
        signal = self.tracker.connector.signal
        intrinsic = signal.rewards(logp=logp, next_observations=observations, acted=acted)
        self.tracker.step(self.state, intrinsic=intrinsic, rewards=rewards, acted=acted)
        if ended.any():
            self.tracker.log_ended(self.state, np.flatnonzero(ended), metrics)
        if not signal.records_column:
            return None
        agents = self.tracker.agents
        return {INTRINSIC_REWARD: {agent: intrinsic[:, i] for i, agent in enumerate(agents)}}


def log_episode_sums(metrics, *, budgets, agents, returns, intrinsic, deploy, z0) -> None:
    """The sums the outer loop reads, over ``n`` ended episodes (both layouts log them
    here: ``BudgetArrays`` and the chunks' ``log_episode_returns``).

    Args:
        budgets: the resolved ``TeamBudget`` of each team.
        agents: the column order of ``returns`` / ``intrinsic``.
        returns, intrinsic: ``(n, n_agents)`` each agent's extrinsic and intrinsic
            return over the episode.
        deploy: ``(n,)`` played at the deployment budget; ``z0``: ``(n, n_teams)`` each
            team's starting budget, in ``budgets`` order.
    """
    extrinsic, total_intrinsic = returns.sum(axis=1), intrinsic.sum(axis=1)
    metrics.log_value(TEAM_EXTRINSIC_RETURN_SUM, float(extrinsic.sum()), reduce="sum")
    metrics.log_value(TEAM_INTRINSIC_RETURN_SUM, float(total_intrinsic.sum()), reduce="sum")
    metrics.log_value(EPISODES_DONE, len(extrinsic), reduce="sum")
    for value in total_intrinsic[-INTRINSIC_MEAN_WINDOW:].tolist():
        metrics.log_value(TEAM_INTRINSIC_RETURN_MEAN, value, window=INTRINSIC_MEAN_WINDOW)
    for k, budget in enumerate(budgets):
        members = [i for i, agent in enumerate(agents) if agent in budget.agents]
        team_intrinsic = intrinsic[:, members].sum(axis=1)
        for at, sum_key, count_key in (
            (budget.z_low, LOW_INTRINSIC_RETURN_SUM, LOW_EPISODES_DONE),  # no demand: the floor
            (budget.z_high, HIGH_INTRINSIC_RETURN_SUM, HIGH_EPISODES_DONE),  # the most demand
        ):
            started = ~deploy & (z0[:, k] == at)
            if started.any():
                metrics.log_value(
                    (PER_TEAM, budget.team, sum_key),
                    float(team_intrinsic[started].sum()),
                    reduce="sum",
                )
                metrics.log_value(
                    (PER_TEAM, budget.team, count_key), int(started.sum()), reduce="sum"
                )
        if deploy.any():
            team_extrinsic = returns[:, members].sum(axis=1)
            for key, values in (
                (DEPLOY_EXTRINSIC_RETURN_SUM, team_extrinsic),
                (DEPLOY_INTRINSIC_RETURN_SUM, team_intrinsic),
            ):
                metrics.log_value(
                    (PER_TEAM, budget.team, key), float(values[deploy].sum()), reduce="sum"
                )
    if deploy.any():
        metrics.log_value(DEPLOY_EXTRINSIC_RETURN_SUM, float(extrinsic[deploy].sum()), reduce="sum")
        metrics.log_value(
            DEPLOY_INTRINSIC_RETURN_SUM, float(total_intrinsic[deploy].sum()), reduce="sum"
        )
        metrics.log_value(DEPLOY_EPISODES_DONE, int(deploy.sum()), reduce="sum")
