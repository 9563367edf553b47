"""Learner connector injecting EFXplorer's conservative advantage into the team GAE."""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override

from marllib_ext.ops.efx import conservative_advantage, segment_slack
from marllib_ext.policies.joint_critic import STATE
from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector, TeamBatch

A_EXT_MEAN = "efx_advantage_ext_mean"
A_FINAL_MEAN = "efx_advantage_final_mean"
CLIP_ACTIVE_FRACTION = "efx_conservative_clip_fraction"
SLACK_MEAN = "efx_slack_mean"
TEAM_INTRINSIC_REWARD_MEAN = "efx_team_intrinsic_reward_mean"
BUDGET_MEAN = "efx_budget_in_batch_mean"
BUDGET = "efx_budget_z"  # the controller's budget as last broadcast to the learner


class EFXJointAdvantageConnector(JointAdvantageConnector):
    """Team GAE on the joint critic, then ``A = min(A_ext[t..T], S[T])`` per segment.

    Preconditions beyond ``JointAdvantageConnector``: every actor observation ends
    with the budget ``z_t`` appended by ``BudgetObservationConnector`` (so z is exactly
    what the actor saw) and ``ACTION_LOGP`` holds the log-probs logged at sampling.
    ``delta_t = -intrinsic_coef * sum_i logp_i``; segments end at each chunk's last
    real step (episode end or chunk cut). The critic sees ``[state, z]`` and is trained
    on extrinsic value targets only.
    """

    def __init__(self, *args, intrinsic_coef: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.intrinsic_coef = float(intrinsic_coef)
        self.budget: float | None = None  # broadcast by the outer loop, for metrics

    @override(JointAdvantageConnector)
    def module_columns(self) -> tuple[str, ...]:
        return (*super().module_columns(), Columns.OBS, Columns.ACTION_LOGP)

    def team_budget(self, team: TeamBatch) -> np.ndarray:
        """``(n_rows,)`` the z every agent saw at each team row."""
        z = np.zeros(team.layout.n_rows, dtype=np.float64)
        for module_id, columns in team.module_columns.items():
            z[team.layout.team_row_of[module_id]] = columns[Columns.OBS][:, -1]
        return z

    @override(JointAdvantageConnector)
    def critic_batch(self, team: TeamBatch) -> dict[str, np.ndarray]:
        columns = super().critic_batch(team)
        z = self.team_budget(team).astype(np.float32)
        columns[STATE] = np.concatenate([columns[STATE], z[:, None]], axis=1)
        return columns

    @override(JointAdvantageConnector)
    def transform_advantages(
        self, team: TeamBatch, advantages: np.ndarray, metrics: Any
    ) -> np.ndarray:
        valid = np.flatnonzero(team.valid)
        logp_sum = team.layout.gather_sum(
            {mid: cols[Columns.ACTION_LOGP] for mid, cols in team.module_columns.items()}
        )
        delta = -self.intrinsic_coef * logp_sum[valid]
        z = self.team_budget(team)[valid]
        ends = (team.terminateds | team.truncateds)[valid]
        a_ext = advantages[valid]
        a_final = conservative_advantage(a_ext, delta, z, ends)
        out = advantages.copy()
        out[valid] = a_final
        if metrics is not None:
            broadcast = {} if self.budget is None else {BUDGET: float(self.budget)}
            metrics.log_dict(
                {
                    **broadcast,
                    A_EXT_MEAN: float(a_ext.mean()),
                    A_FINAL_MEAN: float(a_final.mean()),
                    CLIP_ACTIVE_FRACTION: float(np.mean(a_final < a_ext)),
                    SLACK_MEAN: float(segment_slack(delta, z, ends).mean()),
                    TEAM_INTRINSIC_REWARD_MEAN: float(delta.mean()),
                    BUDGET_MEAN: float(z.mean()),
                },
                key=self.critic_module_id,
                window=1,
            )
        return out
