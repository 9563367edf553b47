"""RLlib's SAC with ROER replay: the package's transition store and K-minibatch updates
(``fast_replay``, ``fast_replay.py``), or RLlib's episode buffers with the ROER (EMA)
subclass swapped in for KL/JS."""

from __future__ import annotations

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.sac import SAC
from ray.rllib.utils.annotations import override

from marllib_ext.algos.roer.buffers import (
    ROERMultiAgentPrioritizedEpisodeReplayBuffer,
    ROERPrioritizedEpisodeReplayBuffer,
)
from marllib_ext.algos.roer.fast_replay import PROGRESS_KEY, FastReplay, fast_training_step
from marllib_ext.rllib_compat import BuildsReplayBuffer, settings_of, should_save_component
from marllib_ext.rllib_compat.checkpoints import ReplayInCheckpoints

STATE_KEY = "fast_replay"


class ROERSAC(ReplayInCheckpoints, BuildsReplayBuffer, SAC):
    """``SACConfig.validate`` accepts only RLlib's buffer names, so the config names
    RLlib's prioritized buffer and this algorithm swaps in the ROER subclass (RLlib's
    path); with ``fast_replay`` the training step is ``fast_training_step``."""

    @override(SAC)
    def setup(self, config) -> None:
        super().setup(config)
        settings = settings_of(self.config)
        self.fast_replay = (
            FastReplay(settings, self.config.num_learners, self.config.seed)
            if settings.fast_replay
            else None
        )

    @override(SAC)
    def training_step(self) -> None:
        if self.fast_replay is None:
            return super().training_step()
        return fast_training_step(self, self.fast_replay)

    @override(Algorithm)
    def step(self) -> dict:
        """One iteration; with ``fast_replay`` its progress also says how far the draws
        are from uniform, computed once per iteration (a pass over every held row)."""
        results = super().step()
        if self.fast_replay is not None:
            results.setdefault(PROGRESS_KEY, {}).update(self.fast_replay.sampling_spread())
        return results

    def replay_buffer(self, build_default, buffer_config: dict):
        settings = settings_of(self.config)
        if settings.fast_replay:
            return None  # the transition store replaces RLlib's buffer
        if not settings.priority_rule.roer:
            return build_default()
        multi_agent = buffer_config.pop("type").startswith("MultiAgent")
        buffer_class = (
            ROERMultiAgentPrioritizedEpisodeReplayBuffer
            if multi_agent
            else ROERPrioritizedEpisodeReplayBuffer
        )
        return buffer_class(per_beta=settings.per_beta, **buffer_config)

    @override(Algorithm)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if (
            self.fast_replay is not None
            and self.replay_in_checkpoints
            and should_save_component(self, STATE_KEY, components, not_components)
        ):
            state[STATE_KEY] = self.fast_replay.get_state()
        return state

    @override(Algorithm)
    def set_state(self, state: dict) -> None:
        if self.fast_replay is not None and STATE_KEY in state and self.replay_in_checkpoints:
            self.fast_replay.set_state(state[STATE_KEY])
        super().set_state(state)
