"""SAC with ROER prioritized replay (seed 003) on RLlib's new API stack: ``sac_roer``
(single-agent gymnasium envs) and ``isac_roer`` (independent SAC, multi-agent).

The RLModule (``policies/roer_sac.py``) is RLlib's default SAC module plus ``V(s)``;
the learner (``learner.py``) adds the value loss and hands ROER priorities to the
buffer; the buffers (``buffers.py``) blend them into the stored ones (EMA with
``per_beta``); ``algorithm.py`` swaps those buffers in.

``per_type``: ``KL`` / ``JS`` (ROER buffers, sampling proportional to the priority,
``alpha=1``, no importance weights: ``beta=0``), ``PER`` (RLlib's prioritized buffer on
``|Q - target|``, ``per_alpha`` / ``per_importance_beta`` from YAML), ``uniform``
(RLlib's plain episode buffer).
"""

from marllib_ext.algos.roer.algorithm import ROERSAC
from marllib_ext.algos.roer.buffers import (
    ROERMultiAgentPrioritizedEpisodeReplayBuffer,
    ROERPrioritizedEpisodeReplayBuffer,
)
from marllib_ext.algos.roer.builders import build_isac_roer, build_sac_roer
from marllib_ext.algos.roer.learner import VALUE_LOSS_KEY, ROERSACLearner
from marllib_ext.algos.roer.settings import ROERSettings
from marllib_ext.policies.roer_sac import ROERSACTorchRLModule

__all__ = [
    "ROERSAC",
    "VALUE_LOSS_KEY",
    "ROERMultiAgentPrioritizedEpisodeReplayBuffer",
    "ROERPrioritizedEpisodeReplayBuffer",
    "ROERSACLearner",
    "ROERSACTorchRLModule",
    "ROERSettings",
    "build_isac_roer",
    "build_sac_roer",
]
