"""ConnectorV2 pieces: the joint-advantage learner connector and its team layout."""

from marllib_ext.postprocessing.joint_advantage import (
    JointAdvantageConnector,
    TeamBatch,
)
from marllib_ext.postprocessing.team_layout import AgentRows, TeamLayout, build_team_layout

__all__ = [
    "AgentRows",
    "JointAdvantageConnector",
    "TeamBatch",
    "TeamLayout",
    "build_team_layout",
]
