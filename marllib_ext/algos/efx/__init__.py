"""EFXplorer conservative exploration (seed 000) on the joint-critic pipelines:
``efx_mappo``, ``efx_vdppo``, ``efx_happo``, ``efx_hatrpo``.

- ``settings``: the EFX fields and their checks;
- ``budget``: the budget range ``[z_low, z_high]`` resolved from the env;
- ``learners``: the joint-critic learners with the conservative-advantage connector;
- ``outer_loop``: per-episode logging and the budget update after each iteration;
- ``builders``: the RLlib configs.

The math is in ``ops.efx``; the connectors in ``postprocessing.budget_connector`` and
``postprocessing.efx_advantage``.
"""

from marllib_ext.algos.efx.builders import (
    build_efx_happo,
    build_efx_hatrpo,
    build_efx_mappo,
    build_efx_vdppo,
)
from marllib_ext.algos.efx.callbacks import (
    PROGRESS_COLUMNS,
    RESULT_KEY,
    budget_connector,
    episode_team_intrinsic,
    progress,
)
from marllib_ext.algos.efx.learners import (
    EFXHAPPOLearner,
    EFXHATRPOLearner,
    EFXJointCriticLearner,
    EFXVDLearner,
)
from marllib_ext.algos.efx.settings import EFXSettings, EFXTrustRegionSettings, EFXVDSettings
from marllib_ext.postprocessing.efx_advantage import EFXVDJointAdvantageConnector

__all__ = [
    "PROGRESS_COLUMNS",
    "RESULT_KEY",
    "EFXHAPPOLearner",
    "EFXHATRPOLearner",
    "EFXJointCriticLearner",
    "EFXSettings",
    "EFXTrustRegionSettings",
    "EFXVDJointAdvantageConnector",
    "EFXVDLearner",
    "EFXVDSettings",
    "budget_connector",
    "build_efx_happo",
    "build_efx_hatrpo",
    "build_efx_mappo",
    "build_efx_vdppo",
    "episode_team_intrinsic",
    "progress",
]
