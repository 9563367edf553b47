"""Joint advantages with a team cost (safe MARL): cost GAE on the critic's cost head."""

from __future__ import annotations

import numpy as np
import torch
from ray.rllib.utils.annotations import override

from marllib_ext.ops.advantages import block_gae
from marllib_ext.ops.lagrange import lagrangian_advantage
from marllib_ext.postprocessing.block_batch import block_values, standardized_over_teams
from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector

# Actor batch column: standardized team cost advantage A_c.
COST_ADVANTAGES = "cost_advantages"
# Critic batch column: cost value targets for V_c(s).
COST_VALUE_TARGETS = "cost_value_targets"
TEAM_COST_VALUE_MEAN = "team_cost_value_mean"
TEAM_COST_MEAN = "team_cost_per_step_mean"
ADVANTAGE_MODES = ("lagrangian", "reward")
NO_COSTS = (
    "this algorithm needs per-agent costs in info['cost'] (summed into "
    "info['team_cost'] by the env adapter); the env reports none -- see "
    "marllib_ext.envs.costs"
)


def block_team_costs(team) -> np.ndarray:
    """``(T, B)`` the team cost of each step of a ``block_batch.TeamView`` (the same
    ``team_cost`` for every agent of the team present there; 0 where none was)."""
    block = team.block
    if block.team_costs is None:
        raise ValueError(NO_COSTS)
    present = block.alive[:, :, team.team]
    costs = np.where(present, block.team_costs[:, :, team.team], -np.inf).max(axis=-1)
    return np.where(present.any(axis=-1), costs, 0.0)


class CostJointAdvantageConnector(JointAdvantageConnector):
    """MAPPO's team GAE plus the same GAE on the team cost with the critic's ``V_c(s)``.

    Both advantages are standardized over valid rows (SafePO's default). Actors get
    ``A_c`` in ``cost_advantages`` and, as ``advantages``:

    - ``advantage_mode="lagrangian"``: ``(A_r - lam * A_c) / (1 + lam)``, with ``lam`` =
      :attr:`cost_multiplier` (set by the learner after each multiplier update);
    - ``advantage_mode="reward"``: ``A_r`` alone (CUP's reward step).

    The critic batch gets ``cost_value_targets``.
    """

    def __init__(self, *args, advantage_mode: str = "lagrangian", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if advantage_mode not in ADVANTAGE_MODES:
            raise ValueError(f"advantage_mode must be one of {ADVANTAGE_MODES}")
        self.advantage_mode = advantage_mode
        self.cost_multiplier = 0.0

    @override(JointAdvantageConnector)
    def block_extra_columns(self, critic, teams, device, metrics):
        """Cost GAE per world on ``V_c`` of the states
        acted on and after each step, ``A_c`` standardized over every block's rows
        where the team acted."""
        advantages, targets, cost_values, costs = [], [], [], []
        for team in teams:
            block_costs = block_team_costs(team)
            values = block_values(critic.compute_cost_values, team.inputs, device)
            next_values = block_values(critic.compute_cost_values, team.next_inputs, device)
            block = team.block
            cost_advantages, cost_targets = block_gae(
                block_costs, values, next_values, block.terminated, block.truncated,
                gamma=self.gamma, lambda_=self.lambda_,
            )  # fmt: skip
            advantages.append(cost_advantages)
            targets.append(cost_targets)
            cost_values.append(values[team.acting])
            costs.append(block_costs[team.acting])
        if metrics is not None:
            metrics.log_dict(
                {
                    TEAM_COST_VALUE_MEAN: float(np.concatenate(cost_values).mean()),
                    TEAM_COST_MEAN: float(np.concatenate(costs).mean()),
                },
                key=self.critic_module_id,
                window=1,
            )
        actor = [{COST_ADVANTAGES: part} for part in standardized_over_teams(advantages, teams)]
        return actor, [{COST_VALUE_TARGETS: target} for target in targets]

    @override(JointAdvantageConnector)
    def combine_after_standardizing(
        self, advantages: np.ndarray, actor_columns: dict[str, np.ndarray]
    ) -> np.ndarray:
        if self.advantage_mode == "reward":
            return advantages
        return lagrangian_advantage(
            torch.from_numpy(advantages),
            torch.from_numpy(actor_columns[COST_ADVANTAGES]),
            self.cost_multiplier,
        ).numpy()
