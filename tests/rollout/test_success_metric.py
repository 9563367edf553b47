"""Training episodes' ``info["success"]`` (a SMAX win) reaches the progress row as
``success_rate``: the mean over the episodes that ended and reported one."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from marllib_ext import algos, make_env
from marllib_ext.algos.api import progress_row
from marllib_ext.rllib_compat.env_runners import EPISODE_SUCCESS
from marllib_ext.rollout.direct import log_successes


def test_only_ended_episodes_that_report_success_count():
    metrics = MetricsLogger()
    tally = SimpleNamespace(runner=SimpleNamespace(metrics=metrics), window=100)
    nan = np.nan
    success = np.array([[nan, 1.0, nan], [0.0, nan, 1.0], [1.0, 0.0, nan]])
    ended = np.array([[False, True, True], [True, False, True], [False, True, True]])
    log_successes(tally, success, ended)
    # Ended and reported: 1 (t0 b1), 0 (t1 b0), 1 (t1 b2), 0 (t2 b1).
    assert metrics.peek(EPISODE_SUCCESS) == pytest.approx(0.5)
    log_successes(tally, None, ended)  # an env without success: nothing logged
    assert metrics.peek(EPISODE_SUCCESS) == pytest.approx(0.5)


def test_smax_training_reports_its_win_rate(ray_session):
    pytest.importorskip("jaxmarl", reason="the smax extra is not installed")
    algo = algos.get("qmix", "pymarl2", batch_episode=4, rnn_hidden_dim=8).rllib_config(
        make_env("smax:3m"), seed=0, num_envs_per_env_runner=4
    )
    algorithm = algo.build_algo()
    try:
        result = algorithm.train()
    finally:
        algorithm.stop()
    rate = progress_row(result)["success_rate"]
    assert not math.isnan(rate) and 0.0 <= rate <= 1.0
