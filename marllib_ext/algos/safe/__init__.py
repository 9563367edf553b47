"""Safe-MARL baselines on the MAPPO pipeline (seed 004: SafePO's projection methods).

All four share :class:`SafeJointCriticLearner` (``learner.py``): a central critic with
a cost head, cost GAE in the joint-advantage connector and a Lagrange multiplier
updated once per iteration from the mean team episode cost (``callbacks.py``; the new
``lam`` is used from the next iteration's update on). Each algorithm overrides one
hook:

- ``mappo_lag``: none -- Adam multiplier, actors on ``(A_r - lam*A_c)/(1+lam)``;
- ``mappo_pid_lag``: ``make_multiplier`` (PID controller);
- ``mappo_focops``: ``actor_loss`` (FOCOPS loss on the Lagrangian advantage,
  ``focops.py``);
- ``mappo_cup``: ``actor_loss`` for its two stages and ``update`` running both passes
  (``cup.py``).
"""

from marllib_ext.algos.safe.builders import (
    build_mappo_cup,
    build_mappo_focops,
    build_mappo_lag,
    build_mappo_pid_lag,
)
from marllib_ext.algos.safe.callbacks import (
    COST_EPISODES_DONE,
    EPISODE_COST_MEAN,
    EPISODE_COST_SUM,
    PROGRESS_COLUMNS,
    RESULT_KEY,
    episode_team_cost,
    log_episode_cost,
    progress,
    update_cost_multiplier,
)
from marllib_ext.algos.safe.cup import CUPLearner
from marllib_ext.algos.safe.focops import FOCOPSLearner
from marllib_ext.algos.safe.learner import PIDLagLearner, SafeJointCriticLearner
from marllib_ext.algos.safe.settings import (
    CUPSettings,
    FOCOPSSettings,
    LagSettings,
    PIDLagSettings,
    with_teams,
)

__all__ = [
    "COST_EPISODES_DONE",
    "EPISODE_COST_MEAN",
    "EPISODE_COST_SUM",
    "PROGRESS_COLUMNS",
    "RESULT_KEY",
    "CUPLearner",
    "CUPSettings",
    "FOCOPSLearner",
    "FOCOPSSettings",
    "LagSettings",
    "PIDLagLearner",
    "PIDLagSettings",
    "SafeJointCriticLearner",
    "build_mappo_cup",
    "build_mappo_focops",
    "build_mappo_lag",
    "build_mappo_pid_lag",
    "episode_team_cost",
    "log_episode_cost",
    "progress",
    "update_cost_multiplier",
    "with_teams",
]
