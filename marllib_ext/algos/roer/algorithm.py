"""RLlib's SAC whose prioritized buffer is the ROER (EMA) subclass for KL/JS."""

from __future__ import annotations

from ray.rllib.algorithms.sac import SAC

from marllib_ext.algos.roer.buffers import (
    ROERMultiAgentPrioritizedEpisodeReplayBuffer,
    ROERPrioritizedEpisodeReplayBuffer,
)
from marllib_ext.rllib_compat import BuildsReplayBuffer, settings_of


class ROERSAC(BuildsReplayBuffer, SAC):
    """``SACConfig.validate`` accepts only RLlib's buffer names, so the config names
    RLlib's prioritized buffer and this algorithm swaps in the ROER subclass."""

    def replay_buffer(self, default, buffer_config: dict):
        settings = settings_of(self.config)
        if not settings.priority_rule.roer:
            return default
        multi_agent = buffer_config.pop("type").startswith("MultiAgent")
        buffer_class = (
            ROERMultiAgentPrioritizedEpisodeReplayBuffer
            if multi_agent
            else ROERPrioritizedEpisodeReplayBuffer
        )
        return buffer_class(per_beta=settings.per_beta, **buffer_config)
