"""Builders and progress columns of the trust-region family."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.utils.metrics import LEARNER_RESULTS

from marllib_ext.algos.happo.builders import check_heterogeneous
from marllib_ext.algos.ppo.builders import build_ippo, build_mappo
from marllib_ext.algos.progress import ProgressColumn
from marllib_ext.algos.trust_region.learners import (
    KL_AFTER_STEP,
    LINE_SEARCH_STEPS,
    STEP_ACCEPTED,
    HATRPOLearner,
    ITRPOLearner,
    MATRPOLearner,
)
from marllib_ext.algos.trust_region.settings import ITRPOSettings, MATRPOSettings
from marllib_ext.envs.handle import EnvHandle


def build_itrpo(
    settings: ITRPOSettings, env: EnvHandle, share_policy: str, seed: int | None
) -> PPOConfig:
    """ITRPO: IPPO's modules and GAE, trust-region actors, value heads by SGD."""
    return build_ippo(settings, env, share_policy, seed).learners(learner_class=ITRPOLearner)


def build_matrpo(
    settings: MATRPOSettings, env: EnvHandle, share_policy: str, seed: int | None
) -> PPOConfig:
    """MATRPO: MAPPO's central critic and team GAE, trust-region actors."""
    return build_mappo(settings, env, share_policy, seed, learner_class=MATRPOLearner)


def build_hatrpo(
    settings: MATRPOSettings, env: EnvHandle, share_policy: str, seed: int | None
) -> PPOConfig:
    """HATRPO: MATRPO with the actors stepped in turn, weighted by HAPPO's factor M."""
    check_heterogeneous(env, share_policy)
    return build_mappo(settings, env, share_policy, seed, learner_class=HATRPOLearner)


PROGRESS_COLUMNS = (
    ProgressColumn("tr_kl", "kl", ".4f"),
    ProgressColumn("tr_line_search_steps", "ls steps", ".1f"),
    ProgressColumn("tr_accept_rate", "accepted", ".2f"),
)


def progress(result: Mapping[str, Any]) -> dict[str, float]:
    """Over the actor modules of the iteration: the mean KL after their steps, the mean
    line-search steps and the share of steps accepted."""
    learners = result.get(LEARNER_RESULTS, {})
    actors = [v for v in learners.values() if isinstance(v, Mapping) and STEP_ACCEPTED in v]

    def mean_of(key: str) -> float:
        return float(np.mean([float(v[key]) for v in actors])) if actors else float("nan")

    return {
        "tr_kl": mean_of(KL_AFTER_STEP),
        "tr_line_search_steps": mean_of(LINE_SEARCH_STEPS),
        "tr_accept_rate": mean_of(STEP_ACCEPTED),
    }
