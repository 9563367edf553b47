"""Replay buffers whose ``update_priorities`` blend ROER's new priority into the stored
one: ``(1 - per_beta) * p_old + per_beta * p_new``."""

from __future__ import annotations

import numpy as np
import torch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.replay_buffers.multi_agent_prioritized_episode_buffer import (
    MultiAgentPrioritizedEpisodeReplayBuffer,
)
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

from marllib_ext.ops.roer import ema_priority
from marllib_ext.rllib_compat import priority_trees


def _blend_into_tree(tree, indices, alpha: float, *, priorities, per_beta: float) -> np.ndarray:
    """EMA of the new priorities with the stored ones (the tree holds ``p ** alpha``)."""
    old = np.array([tree[idx] for idx in indices], dtype=np.float64) ** (1.0 / alpha)
    return ema_priority(
        torch.from_numpy(old),
        torch.as_tensor(np.asarray(priorities), dtype=torch.float64),
        per_beta,
    ).numpy()


class ROERPrioritizedEpisodeReplayBuffer(PrioritizedEpisodeReplayBuffer):
    """RLlib's prioritized episode buffer with the EMA blend."""

    def __init__(self, *args, per_beta: float = 1.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.per_beta = per_beta

    @override(PrioritizedEpisodeReplayBuffer)
    def update_priorities(self, priorities, module_id=None) -> None:
        blended = _blend_into_tree(
            *priority_trees(self), priorities=priorities, per_beta=self.per_beta
        )
        super().update_priorities(blended, module_id)


class ROERMultiAgentPrioritizedEpisodeReplayBuffer(MultiAgentPrioritizedEpisodeReplayBuffer):
    """Multi-agent version: one EMA per module's segment tree."""

    def __init__(self, *args, per_beta: float = 1.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.per_beta = per_beta

    @override(MultiAgentPrioritizedEpisodeReplayBuffer)
    def update_priorities(self, priorities, module_id) -> None:
        blended = _blend_into_tree(
            *priority_trees(self, module_id), priorities=priorities, per_beta=self.per_beta
        )
        super().update_priorities(blended, module_id)
