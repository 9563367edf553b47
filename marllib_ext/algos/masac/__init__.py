"""Soft actor-critic for teams on replayed team transitions: ``masac`` (a centralized
twin soft Q-critic, continuous or discrete actions) and ``hasac`` (HARL's
heterogeneous-agent SAC: the same critic, the actors updated one after another).
``settings`` holds the YAML fields, ``learners`` the team losses, ``builders`` the
RLlib configs; ``algos.team_replay`` stores, samples and prioritizes."""

from marllib_ext.algos.masac.builders import TEAM_MODULE, build_hasac, build_masac
from marllib_ext.algos.masac.learners import HASACLearner, MASACLearner
from marllib_ext.algos.masac.settings import MASACSettings

__all__ = [
    "TEAM_MODULE",
    "HASACLearner",
    "MASACLearner",
    "MASACSettings",
    "build_hasac",
    "build_masac",
]
