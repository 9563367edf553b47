"""``happo``: Heterogeneous-Agent PPO (Kuba et al. 2022) on the MAPPO pipeline, actors
updated one policy after another with the factor ``M`` (``ops.happo``)."""

from marllib_ext.algos.happo.builders import build_happo, check_heterogeneous
from marllib_ext.algos.happo.learner import (
    HAPPOAdvantageConnector,
    HAPPOLearner,
    TeamRowColumn,
)
from marllib_ext.algos.ppo.phased import FACTOR_MEAN
from marllib_ext.algos.ppo.schedule import HAPPO_FACTOR
from marllib_ext.postprocessing.block_batch import TEAM_ROW

__all__ = [
    "FACTOR_MEAN",
    "HAPPO_FACTOR",
    "TEAM_ROW",
    "HAPPOAdvantageConnector",
    "HAPPOLearner",
    "TeamRowColumn",
    "build_happo",
    "check_heterogeneous",
]
