"""EFX's team budgets on the batched rollout (``BudgetObservationConnector``'s array
form, a ``rollout.extensions.ObservationExtension``), and the episode sums both forms
log for the outer loop."""

from __future__ import annotations

import dataclasses

import numpy as np

from marllib_ext.envs.arrays import WorldArrays
from marllib_ext.ops.efx import budget_step, intrinsic_rewards

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
# Smoothed over the last 100 episodes, for display.
TEAM_INTRINSIC_RETURN_MEAN = "efx_team_intrinsic_return_mean"
INTRINSIC_MEAN_WINDOW = 100
# Per-team sums of the deployment episodes, under env_runners/<PER_TEAM>/<team>/.
PER_TEAM = "efx_per_team"


class BudgetArrays:
    """Every world's team budgets ``z[b, team]`` through a batched rollout, as
    ``BudgetObservationConnector`` keeps them episode by episode: a new episode draws
    ``(deploy, z_0)`` from the connector (its controllers, sampling mode and random
    generator); after each step ``z <- clip(z - delta, z_low, z_high)`` with
    ``delta = -intrinsic_coef * sum_{i in team, acted} log pi_i``; each agent's
    observation gets its team's normalized z appended (``BudgetInput``), so the
    learner reads back what the actor saw. Where an episode ends, its team returns are
    logged as for chunks (``log_episode_sums``)."""

    def __init__(self, connector, agents: list[str], num_envs: int) -> None:
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
        self.z = np.zeros((num_envs, len(budgets)))
        self.z0 = np.zeros((num_envs, len(budgets)))
        self.deploy = np.zeros(num_envs, bool)
        self.returns = np.zeros((num_envs, len(agents)))  # extrinsic, per agent
        self.logp = np.zeros((num_envs, len(agents)))  # summed over the episode

    def start(self, worlds: np.ndarray) -> None:
        for world in worlds:
            deploy, z0 = self.connector.draw_initial_budgets()
            self.deploy[world] = deploy
            self.z0[world] = [z0[team] for team in self.teams]
        self.z[worlds] = self.z0[worlds]
        self.returns[worlds] = 0.0
        self.logp[worlds] = 0.0

    def extend(self, arrays: WorldArrays) -> WorldArrays:
        observations = {
            agent: self.inputs[k].append(arrays.observations[agent], self.z[:, k])
            for agent, k in zip(self.agents, self.team_of_agent, strict=True)
        }
        return dataclasses.replace(arrays, observations=observations)

    def step(self, *, logp, rewards, acted, ended, metrics) -> None:
        logp = np.where(acted, logp, 0.0)
        self.logp += logp
        self.returns += np.where(acted, rewards, 0.0)
        coef = float(self.connector.intrinsic_coef)
        for k, team in enumerate(self.teams):
            controller = self.connector.controllers[team]
            _, delta = intrinsic_rewards(logp[:, self.members[k]], coef=coef)
            self.z[:, k] = budget_step(
                self.z[:, k], delta, z_low=controller.z_low, z_high=controller.z_high
            )
        if ended.any():
            self._log_episodes(np.flatnonzero(ended), metrics)

    def _log_episodes(self, worlds: np.ndarray, metrics) -> None:
        log_episode_sums(
            metrics,
            coef=float(self.connector.intrinsic_coef),
            budgets=self.connector.settings.team_budgets,
            agents=self.agents,
            returns=self.returns[worlds],
            logp=self.logp[worlds],
            deploy=self.deploy[worlds],
            z0=self.z0[worlds],
        )


def log_episode_sums(metrics, *, coef, budgets, agents, returns, logp, deploy, z0) -> None:
    """The sums the outer loop reads, over ``n`` ended episodes (both layouts log them
    here: ``BudgetArrays`` and the chunks' ``log_episode_returns``).

    Args:
        coef: ``intrinsic_coef`` (intrinsic return ``-coef * sum log pi``).
        budgets: the resolved ``TeamBudget`` of each team.
        agents: the column order of ``returns`` / ``logp``.
        returns, logp: ``(n, n_agents)`` each agent's extrinsic return and summed
            log-probabilities over the episode.
        deploy: ``(n,)`` played at the deployment budget; ``z0``: ``(n, n_teams)`` each
            team's starting budget, in ``budgets`` order.
    """
    extrinsic = returns.sum(axis=1)
    intrinsic = -coef * logp.sum(axis=1)
    metrics.log_value(TEAM_EXTRINSIC_RETURN_SUM, float(extrinsic.sum()), reduce="sum")
    metrics.log_value(TEAM_INTRINSIC_RETURN_SUM, float(intrinsic.sum()), reduce="sum")
    metrics.log_value(EPISODES_DONE, len(extrinsic), reduce="sum")
    for value in intrinsic[-INTRINSIC_MEAN_WINDOW:].tolist():
        metrics.log_value(TEAM_INTRINSIC_RETURN_MEAN, value, window=INTRINSIC_MEAN_WINDOW)
    for k, budget in enumerate(budgets):
        members = [i for i, agent in enumerate(agents) if agent in budget.agents]
        team_intrinsic = -coef * logp[:, members].sum(axis=1)
        low = ~deploy & (z0[:, k] == budget.z_low)  # no demand: measures the floor
        if low.any():
            metrics.log_value(
                (PER_TEAM, budget.team, LOW_INTRINSIC_RETURN_SUM),
                float(team_intrinsic[low].sum()),
                reduce="sum",
            )
            metrics.log_value(
                (PER_TEAM, budget.team, LOW_EPISODES_DONE), int(low.sum()), reduce="sum"
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
        metrics.log_value(DEPLOY_INTRINSIC_RETURN_SUM, float(intrinsic[deploy].sum()), reduce="sum")
        metrics.log_value(DEPLOY_EPISODES_DONE, int(deploy.sum()), reduce="sum")
