"""JointAdvantageConnector on real RLlib batches: every agent's row for env step t gets
the advantage of team step t, also across chunk cuts, checked against a reference
computed only from what the observations say (episode id, step, agent)."""

from collections import defaultdict

import pytest
from ray.rllib.core.columns import Columns

from marllib_ext.algos.ppo.learners import JointCriticPPOLearner
from marllib_ext.postprocessing import JointAdvantageConnector
from tests.helpers import EPISODE_LENGTH, N_AGENTS, counter_config
from tests.team_advantages import GAMMA, LAMBDA, recording, reference_team_advantages

RECORDED = []


class RecordingLearner(JointCriticPPOLearner):
    advantage_connector_class = recording(JointAdvantageConnector, RECORDED)


@pytest.mark.parametrize("share_policy", ["all", "individual"])
def test_every_agent_row_gets_its_team_step_advantage(ray_session, share_policy):
    RECORDED.clear()
    # Fragments of 5 steps cut 7-step episodes mid-way: continuation chunks appear.
    config = counter_config(
        "mappo", "test:counter", RecordingLearner, share_policy, gamma=GAMMA, lambda_=LAMBDA
    )
    algorithm = config.build_algo()
    try:
        for _ in range(3):
            algorithm.train()
    finally:
        algorithm.stop()

    saw_continuation = saw_terminated = saw_truncated = False
    for record in RECORDED:
        reference = reference_team_advantages(record)
        rows_per_step = defaultdict(int)
        for columns in record["modules"].values():
            for (uid, t, _), valid, advantage in zip(
                columns[Columns.OBS],
                columns[Columns.LOSS_MASK],
                columns[Columns.ADVANTAGES],
                strict=True,
            ):
                if not valid:
                    assert advantage == 0.0
                    continue
                key = (int(uid), int(t))
                rows_per_step[key] += 1
                assert advantage == pytest.approx(reference[key], abs=2e-4), key
        assert set(rows_per_step.values()) == {N_AGENTS}
        starts = {}
        for uid, t in rows_per_step:
            starts[uid] = min(starts.get(uid, t), t)
        saw_continuation |= any(t > 0 for t in starts.values())
        ends = {(uid, t) for uid, t in rows_per_step if t == EPISODE_LENGTH - 1}
        saw_terminated |= any(uid % 2 == 1 for uid, _ in ends)
        saw_truncated |= any(uid % 2 == 0 for uid, _ in ends)
    assert saw_continuation and saw_terminated and saw_truncated
