"""Env contract checks that must stop training with a clear error, also when the env
runs in a remote env runner (whose exceptions RLlib's fault tolerance only restarts).

The env adapter ends an episode at a non-finite reward or an all-zero action mask and
reports it in the infos;
an ``on_episode_end`` callback (on every registered algorithm) turns the report into
env-runner metrics, and :func:`raise_on_env_errors` raises in the driver."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from marllib_ext.envs.adapter import (
    EMPTY_ACTION_MASK_KEY,
    NONFINITE_REWARD_KEY,
    breach_metric,
    log_contract_report,
)
from marllib_ext.errors import EnvError
from marllib_ext.rllib_compat.env_runners import callback_functions
from marllib_ext.rollout.direct import needs_no_episode_objects

# report key in the infos -> what the agent did wrong, as the error says it
CONTRACT_BREACHES = {
    NONFINITE_REWARD_KEY: "got a non-finite reward (NaN or inf)",
    EMPTY_ACTION_MASK_KEY: "has no legal action (an all-zero action mask)",
}


NONFINITE_EPISODES = breach_metric(NONFINITE_REWARD_KEY, "episodes")


def with_episode_end_callback(config: AlgorithmConfig, callback) -> AlgorithmConfig:
    """``config`` with ``callback`` run after its existing ``on_episode_end`` ones."""
    existing = callback_functions(config, "on_episode_end")
    return config.callbacks(on_episode_end=[*existing, callback])


@needs_no_episode_objects  # the batched rollout logs the reports its arrays carry
def log_contract_breaches(*, episode, metrics_logger=None, **kwargs) -> None:
    """``on_episode_end``: the adapter's reports of a broken env contract, if any."""
    if not isinstance(episode, MultiAgentEpisode):
        return
    for info in episode.get_infos(-1).values():
        for key in CONTRACT_BREACHES:
            report = (info or {}).get(key)
            if report is None:
                continue
            log_contract_report(metrics_logger, key, report)
        return


# The callback's name when it checked rewards only; checkpoints pickle it by name.
log_nonfinite_reward = log_contract_breaches


def raise_on_env_errors(result: Mapping[str, Any], env) -> None:
    """Raises ``EnvError`` naming the env, the agent and the env step when an episode of
    this iteration broke the env contract (a non-finite reward, an empty action mask)."""
    stats = result.get("env_runners", {})
    for key, breach in CONTRACT_BREACHES.items():
        episodes = stats.get(breach_metric(key, "episodes"))
        if episodes is None or math.isnan(episodes) or episodes <= 0:
            continue
        agent = env.layout.agents[int(stats[breach_metric(key, "agent_index")])]
        step = int(stats[breach_metric(key, "env_step")])
        raise EnvError(
            f"env {env.name!r}: agent {agent!r} {breach} at env step {step} of an episode "
            f"({int(episodes)} episode(s) this iteration)"
        )
