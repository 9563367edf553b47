"""The trust-region family: ``itrpo``, ``matrpo`` and ``hatrpo`` (Kuba et al. 2022),
one whole-batch trust-region step per actor policy (``ops.trust_region``)."""

from marllib_ext.algos.trust_region.builders import (
    PROGRESS_COLUMNS,
    build_hatrpo,
    build_itrpo,
    build_matrpo,
    progress,
)
from marllib_ext.algos.trust_region.learners import (
    HATRPOLearner,
    ITRPOLearner,
    MATRPOLearner,
    TrustRegionActors,
    policy_parameters,
)
from marllib_ext.algos.trust_region.settings import ITRPOSettings, MATRPOSettings

__all__ = [
    "PROGRESS_COLUMNS",
    "HATRPOLearner",
    "ITRPOLearner",
    "ITRPOSettings",
    "MATRPOLearner",
    "MATRPOSettings",
    "TrustRegionActors",
    "build_hatrpo",
    "build_itrpo",
    "build_matrpo",
    "policy_parameters",
    "progress",
]
