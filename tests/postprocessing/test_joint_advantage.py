"""JointAdvantageConnector on real RLlib batches: every agent's row for env step t gets
the advantage of team step t, also across chunk cuts, checked against a reference
computed only from what the observations say (episode id, step, agent)."""

import copy
from collections import defaultdict

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from marllib_ext.algos.ppo.learners import JointCriticPPOLearner
from marllib_ext.envs import register_env
from marllib_ext.policies import CRITIC_MODULE_ID, STATE
from marllib_ext.postprocessing import JointAdvantageConnector
from tests.helpers import EPISODE_LENGTH, N_AGENTS, CounterEnv, counter_config, reward_of

GAMMA, LAMBDA = 0.9, 0.8


RECORDED = []


class RecordingConnector(JointAdvantageConnector):
    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        batch = super().__call__(rl_module=rl_module, batch=batch, episodes=episodes, **kwargs)
        critic = copy.deepcopy(rl_module[CRITIC_MODULE_ID])  # weights as used here
        RECORDED.append(
            {
                "modules": {
                    mid: {
                        c: batch[mid][c].detach().cpu().numpy()
                        for c in (
                            Columns.OBS,
                            Columns.LOSS_MASK,
                            Columns.ADVANTAGES,
                            Columns.VALUE_TARGETS,
                        )
                    }
                    for mid in batch
                    if mid != CRITIC_MODULE_ID
                },
                "critic": lambda states, critic=critic: (
                    critic.compute_values({STATE: torch.as_tensor(states, dtype=torch.float32)})
                    .detach()
                    .numpy()
                ),
            }
        )
        return batch


class RecordingLearner(JointCriticPPOLearner):
    advantage_connector_class = RecordingConnector


register_env("test:counter", CounterEnv, state_source="observations")


def reference_team_advantages(record, reward_fn=reward_of, critic_key="critic"):
    """(uid, t) -> normalized team advantage, from obs-decoded identities only.

    ``reward_fn(uid, t, agent)`` is the per-agent signal summed into the team's;
    ``record[critic_key]`` maps states to the values the GAE runs on."""
    valid_steps, chunk_ends = set(), set()
    for columns in record["modules"].values():
        for (uid, t, _), valid in zip(
            columns[Columns.OBS], columns[Columns.LOSS_MASK], strict=True
        ):
            (valid_steps if valid else chunk_ends).add((int(uid), int(t)))

    def state(uid, t):
        return np.concatenate([[uid, t, i] for i in range(N_AGENTS)])

    by_uid = defaultdict(list)
    for uid, t in sorted(valid_steps):
        by_uid[uid].append(t)
    advantages = {}
    for uid, steps in by_uid.items():
        # Split into chunks at the bootstrap rows (chunk end = next t is a bootstrap row).
        segments, current = [], []
        for t in steps:
            current.append(t)
            if (uid, t + 1) in chunk_ends:
                segments.append(current)
                current = []
        assert not current, "every chunk ends in a bootstrap row"
        for segment in segments:
            ts = np.array(segment)
            values = record[critic_key](np.stack([state(uid, t) for t in ts]))
            bootstrap = record[critic_key](state(uid, ts[-1] + 1)[None])[0]
            terminated = ts[-1] + 1 == EPISODE_LENGTH and uid % 2 == 1
            running = 0.0
            for k in range(len(ts) - 1, -1, -1):
                team_reward = sum(reward_fn(uid, ts[k], i) for i in range(N_AGENTS))
                if k == len(ts) - 1:
                    next_value = 0.0 if terminated else bootstrap
                    running = team_reward + GAMMA * next_value - values[k]
                else:
                    delta = team_reward + GAMMA * values[k + 1] - values[k]
                    running = delta + GAMMA * LAMBDA * running
                advantages[(uid, int(ts[k]))] = running
    raw = np.array(list(advantages.values()))
    return {key: (value - raw.mean()) / max(1e-4, raw.std()) for key, value in advantages.items()}


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
