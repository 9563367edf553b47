"""``coma``: counterfactual multi-agent policy gradients (Foerster et al. 2018) on the CC
pipeline, with A2C actors as MARLlib's COMA (``ops.coma`` has the baseline)."""

from marllib_ext.algos.coma.builders import build_coma, coma_critic_spec
from marllib_ext.algos.coma.learner import COMAAdvantageConnector, COMALearner, COMASettings
from marllib_ext.legacy_paths import legacy_getattr

__getattr__ = legacy_getattr(__name__)  # names of the flat layout's module, for checkpoints

__all__ = [
    "COMAAdvantageConnector",
    "COMALearner",
    "COMASettings",
    "build_coma",
    "coma_critic_spec",
]
