"""Off-policy MARL on replayed team episodes, the base of ``algos.joint_q`` (iql, vdn,
qmix) and ``algos.ddpg`` (iddpg, maddpg, facmac).

- ``settings``: replay, sampling and prioritization fields;
- ``algorithm``: ``TeamReplayAlgorithm`` (store the runners' team episodes
  (``rollout.team_episodes``), replay, hand priorities to the store);
- ``learner``: ``TeamReplayLearner``, the base whose ``team_loss`` each algorithm writes;
- ``specs``: the config class, team module specs and agent/team layout;
- ``progress``: the progress columns.
"""

from marllib_ext.algos.team_replay.algorithm import (
    EPISODES_SAMPLED,
    LAYOUT_KEY,
    TeamReplayAlgorithm,
)
from marllib_ext.algos.team_replay.learner import TeamLoss, TeamReplayLearner
from marllib_ext.algos.team_replay.progress import PROGRESS_COLUMNS, PROGRESS_KEY, progress
from marllib_ext.algos.team_replay.settings import TeamReplaySettings
from marllib_ext.algos.team_replay.specs import (
    TeamReplayConfig,
    mixer_specs,
    team_module_ids,
    team_replay_config,
    team_replay_layout,
)

__all__ = [
    "EPISODES_SAMPLED",
    "LAYOUT_KEY",
    "PROGRESS_COLUMNS",
    "PROGRESS_KEY",
    "TeamLoss",
    "TeamReplayAlgorithm",
    "TeamReplayConfig",
    "TeamReplayLearner",
    "TeamReplaySettings",
    "mixer_specs",
    "progress",
    "team_module_ids",
    "team_replay_config",
    "team_replay_layout",
]
