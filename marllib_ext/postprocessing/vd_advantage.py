"""Joint-advantage connector for the value-decomposition critic (V_tot from a mixer)."""

from __future__ import annotations

import numpy as np
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override

from marllib_ext.policies.vd_critic import AGENT_OBS, AGENT_PRESENT
from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector, TeamBatch


class VDJointAdvantageConnector(JointAdvantageConnector):
    """Team GAE on ``V_tot``: the critic batch also holds every agent's own observation.

    ``agent_obs[row, i]`` is agent ``i``'s (sorted ids) observation at that team row,
    zero-padded to the largest observation size -- exactly the observation its actor
    saw (EFX's budget included).
    """

    BLOCK_BATCH_OPTIONS: dict = {"agent_obs": True}

    @override(JointAdvantageConnector)
    def module_columns(self) -> tuple[str, ...]:
        return (*super().module_columns(), Columns.OBS)

    @override(JointAdvantageConnector)
    def critic_batch(self, team: TeamBatch) -> dict[str, np.ndarray]:
        columns = super().critic_batch(team)
        layout = team.layout
        observations = {mid: cols[Columns.OBS] for mid, cols in team.module_columns.items()}
        max_dim = max(obs.shape[1] for obs in observations.values())
        agent_obs = np.zeros((layout.n_rows, len(layout.agent_ids), max_dim), np.float32)
        for module_id, obs in observations.items():
            agent_obs[
                layout.team_row_of[module_id], layout.agent_index_of[module_id], : obs.shape[1]
            ] = obs
        columns[AGENT_OBS] = agent_obs
        columns[AGENT_PRESENT] = layout.present.astype(np.float32)
        return columns
