"""``coma``: counterfactual multi-agent policy gradients (Foerster et al. 2018) on the CC
pipeline, with A2C actors as MARLlib's COMA (``ops.coma`` has the baseline)."""

from marllib_ext.algos.coma.builders import build_coma, coma_critic_spec
from marllib_ext.algos.coma.learner import COMAAdvantageConnector, COMALearner, COMASettings

__all__ = [
    "COMAAdvantageConnector",
    "COMALearner",
    "COMASettings",
    "build_coma",
    "coma_critic_spec",
]
