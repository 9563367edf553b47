"""The package's env runner for every multi-agent env (``BatchedEnvRunner``): a
batched simulator is one env of ``num_envs_per_env_runner`` worlds, sampled through
``rollout.ArrayRollout`` where the env and pipeline allow it, and every episode it
starts iterates its agents in sorted order."""

from __future__ import annotations

import logging

from ray.rllib.callbacks.utils import make_callback
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.utils.annotations import override

from marllib_ext.envs.adapter import ParallelEnvAdapter
from marllib_ext.envs.copies import CopiesWorld
from marllib_ext.rllib_compat import (
    env_runner_callbacks,
    registered_env_creator,
    reset_before_next_sample,
)
from marllib_ext.rllib_compat.env_runners import StartsSortedAgentsEpisodes
from marllib_ext.rollout.array_rollout import ArrayRollout
from marllib_ext.rollout.sampler import SamplerChoice, choose_sampler

logger = logging.getLogger(__name__)


class BatchedEnvRunner(StartsSortedAgentsEpisodes, MultiAgentEnvRunner):
    """``MultiAgentEnvRunner`` whose ``num_envs_per_env_runner`` envs are one batched
    simulator (``EnvSpec.batched_creator``) instead of that many separate copies; envs
    without one are built as RLlib builds them. The runner of every multi-agent env:
    its episodes iterate their agents in sorted order."""

    @override(MultiAgentEnvRunner)
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.choose_sampler()

    def choose_sampler(self) -> str:
        """Decides how this runner samples, once its env and module exist (again when
        its env is rebuilt; ``rollout.sampler.choose_sampler``): through
        ``ArrayRollout`` (rollout blocks, or episode chunks built from arrays) or
        through RLlib's per-world path. Logs and returns the decision, with the reason
        where a cheaper path is refused."""
        self.sampler_choice: SamplerChoice = choose_sampler(self)
        self.array_rollout: ArrayRollout | None = None
        if self.sampler_choice.uses_arrays:
            self.array_rollout = ArrayRollout(self, hands_blocks=self.sampler_choice.hands_blocks)
        self.sampling = self.sampling_description()
        logger.info("env runner %s %s", self.worker_index, self.sampling)
        return self.sampling

    def sampling_description(self) -> str:
        """``sampling: rollout blocks`` / ``sampling: episode chunks built from arrays
        (reason)`` / ``sampling: RLlib's per-world episodes (reason)``."""
        return self.sampler_choice.description()

    @override(MultiAgentEnvRunner)
    def make_env(self):
        self.array_rollout = None  # the env is being built
        self._make_env()
        if getattr(self, "module", None) is not None:  # a rebuilt env: decide again
            self.choose_sampler()

    def _make_env(self) -> None:
        creator = registered_env_creator(self.config.env)
        spec = getattr(creator, "spec", None)
        if getattr(spec, "batched_creator", None) is None:
            super().make_env()
            adapters = [env.unwrapped for env in getattr(self.env, "envs", [])]
            if adapters and all(isinstance(a, ParallelEnvAdapter) for a in adapters):
                # The same copies, also reachable as one array world.
                env_context = EnvContext(
                    dict(self.config.env_config),
                    worker_index=self.worker_index,
                    num_workers=self.config.num_env_runners,
                )
                self.env.world = CopiesWorld(
                    adapters,
                    turn_based=getattr(spec, "turn_based", False),
                    make_probe=lambda: creator(env_context),
                )
            return
        if self.env is not None:
            self.env.close()
        env_context = EnvContext(
            dict(self.config.env_config),
            worker_index=self.worker_index,
            num_workers=self.config.num_env_runners,
            remote=self.config.remote_worker_envs,
        )
        self.env = creator.make_batched(self.config.num_envs_per_env_runner, env_context)
        self.num_envs = self.env.num_envs
        reset_before_next_sample(self)
        make_callback(
            "on_environment_created",
            callbacks_objects=env_runner_callbacks(self),
            callbacks_functions=self.config.callbacks_on_environment_created,
            kwargs=dict(
                env_runner=self,
                metrics_logger=self.metrics,
                env=self.env.unwrapped,
                env_context=env_context,
            ),
        )

    @override(MultiAgentEnvRunner)
    def sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
        random_actions: bool = False,
        force_reset: bool = False,
    ):
        """Through ``rollout.ArrayRollout`` when the env and pipeline allow it (step
        counts; whole episodes go through RLlib's path, which resets every world)."""
        rollout = self.array_rollout
        truncating = self.config.batch_mode == "truncate_episodes"
        if num_timesteps is None and num_episodes is None and truncating:
            fragment = self.config.get_rollout_fragment_length(self.worker_index)
            num_timesteps = fragment * self.num_envs
        if rollout is None or num_timesteps is None:
            if rollout is not None:
                reset_before_next_sample(self)  # RLlib's path leaves the worlds elsewhere
            # RLlib's loop converts every episode ended so far to numpy again at each
            # step (quadratic in short episodes); convert each one once, at the end.
            to_numpy, self.episodes_to_numpy = self.episodes_to_numpy, False
            try:
                episodes = super().sample(
                    num_timesteps=num_timesteps,
                    num_episodes=num_episodes,
                    explore=explore,
                    random_actions=random_actions,
                    force_reset=force_reset,
                )
            finally:
                self.episodes_to_numpy = to_numpy
            return [episode.to_numpy() for episode in episodes] if to_numpy else episodes
        return rollout.sample(
            num_timesteps=num_timesteps,
            explore=self.config.explore if explore is None else explore,
            random_actions=random_actions,
            force_reset=force_reset,
        )
