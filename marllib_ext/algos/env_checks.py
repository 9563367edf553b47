"""Env contract checks that must stop training with a clear error, also when the env
runs in a remote env runner (whose exceptions RLlib's fault tolerance only restarts).

The env adapter ends an episode at a non-finite reward and reports it in the infos;
an ``on_episode_end`` callback (on every registered algorithm) turns the report into
env-runner metrics, and :func:`raise_on_env_errors` raises in the driver."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from marllib_ext.envs.adapter import NONFINITE_REWARD_KEY
from marllib_ext.errors import EnvError

NONFINITE_EPISODES = "env_nonfinite_reward_episodes"
NONFINITE_AGENT_INDEX = "env_nonfinite_reward_agent_index"
NONFINITE_ENV_STEP = "env_nonfinite_reward_env_step"


def with_episode_end_callback(config: AlgorithmConfig, callback) -> AlgorithmConfig:
    """``config`` with ``callback`` run after its existing ``on_episode_end`` ones."""
    existing = config.callbacks_on_episode_end
    existing = [] if existing is None else existing if isinstance(existing, list) else [existing]
    return config.callbacks(on_episode_end=[*existing, callback])


def log_nonfinite_reward(*, episode, metrics_logger=None, **kwargs) -> None:
    """``on_episode_end``: the adapter's report of a non-finite reward, if any."""
    if not isinstance(episode, MultiAgentEpisode):
        return
    for info in episode.get_infos(-1).values():
        report = (info or {}).get(NONFINITE_REWARD_KEY)
        if report is not None:
            metrics_logger.log_value(NONFINITE_EPISODES, 1, reduce="sum")
            metrics_logger.log_value(NONFINITE_AGENT_INDEX, report["agent_index"], reduce="min")
            metrics_logger.log_value(NONFINITE_ENV_STEP, report["env_step"], reduce="min")
            return


def raise_on_env_errors(result: Mapping[str, Any], env) -> None:
    """Raises ``EnvError`` naming the env, the agent and the env step when an episode of
    this iteration met a non-finite reward."""
    stats = result.get("env_runners", {})
    episodes = stats.get(NONFINITE_EPISODES)
    if episodes is None or math.isnan(episodes) or episodes <= 0:
        return
    agent = env.layout.agents[int(stats[NONFINITE_AGENT_INDEX])]
    raise EnvError(
        f"env {env.name!r}: agent {agent!r} got a non-finite reward (NaN or inf) at env "
        f"step {int(stats[NONFINITE_ENV_STEP])} of an episode ({int(episodes)} episode(s) "
        "this iteration)"
    )
