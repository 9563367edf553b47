"""Agents that arrive late and die early, through the centralized-critic pipeline on
real RLlib batches, against a reference computed from the observations alone.

Script per episode (7 steps, uid in the observation): ``agent_0`` plays throughout;
``agent_2`` arrives with its first observation at step 2; ``agent_1`` dies after
acting at step 6, the last step before the time limit (even uids), or at step 2 (odd
uids), where every agent left dies at step 5 and the episode ends terminated."""

from collections import defaultdict

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv
from ray.rllib.core.columns import Columns

from marllib_ext.algos.ppo.learners import JointCriticPPOLearner
from marllib_ext.envs import register_env
from marllib_ext.postprocessing import JointAdvantageConnector
from tests.helpers import EPISODE_LENGTH, counter_config, reward_of
from tests.team_advantages import GAMMA, LAMBDA, recording, reference_present_agents

RECORDED = []


class RecordingLearner(JointCriticPPOLearner):
    advantage_connector_class = recording(JointAdvantageConnector, RECORDED)


AGENTS = ("agent_0", "agent_1", "agent_2")
ARRIVAL = 2
ALL_DIE_AT = 5  # odd uids


def death_of_agent_1(uid):
    return 2 if uid % 2 else EPISODE_LENGTH - 1


class ComeAndGoCounterEnv(ParallelEnv):
    metadata = {"name": "come_and_go_counter_v0"}

    def __init__(self):
        self.possible_agents = list(AGENTS)
        self.agents = []
        self.uids = iter(range(1, 10**6))

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self, agents):
        return {a: np.array([self.uid, self.t, AGENTS.index(a)], np.float32) for a in agents}

    def reset(self, seed=None, options=None):
        self.uid, self.t = next(self.uids), 0
        self.agents = ["agent_0", "agent_1"]
        return self._obs(self.agents), {a: {} for a in self.agents}

    def step(self, actions):
        acting = list(self.agents)
        assert set(actions) == set(acting), (actions, acting)
        rewards = {a: reward_of(self.uid, self.t, AGENTS.index(a)) for a in acting}
        dying = {"agent_1"} & set(acting) if self.t == death_of_agent_1(self.uid) else set()
        if self.uid % 2 and self.t == ALL_DIE_AT:
            dying = set(acting)
        self.t += 1
        truncated = self.t >= EPISODE_LENGTH
        alive = [a for a in acting if a not in dying]
        arriving = ["agent_2"] if self.t == ARRIVAL and alive else []
        observed = acting + arriving
        self.agents = [] if truncated else alive + arriving
        return (
            self._obs(observed),
            {**rewards, **{a: 0.0 for a in arriving}},
            {a: a in dying for a in observed},
            {a: truncated and a not in dying for a in observed},
            {a: {} for a in observed},
        )


register_env("test:come_and_go_counter", ComeAndGoCounterEnv, state_source="observations")


def acts(uid, t, agent):
    """Whether ``agent`` observes and acts at step ``t`` of episode ``uid``."""
    last = ALL_DIE_AT if uid % 2 else EPISODE_LENGTH - 1
    if agent == 1:
        last = min(last, death_of_agent_1(uid))
    return t <= last and (agent != 2 or t >= ARRIVAL)


@pytest.mark.parametrize(
    "share_policy", ["all", pytest.param("individual", marks=pytest.mark.slow)]
)
def test_present_agents_get_their_team_step_advantage(ray_session, share_policy):
    RECORDED.clear()
    config = counter_config(
        "mappo",
        "test:come_and_go_counter",
        RecordingLearner,
        share_policy,
        gamma=GAMMA,
        lambda_=LAMBDA,
    )
    algorithm = config.build_algo()
    try:
        for _ in range(3):
            algorithm.train()
    finally:
        algorithm.stop()

    seen = defaultdict(set)
    for record in RECORDED:
        reference = reference_present_agents(record, acts, lambda uid: ALL_DIE_AT)
        for columns in record["modules"].values():
            for (uid, t, agent), valid, advantage in zip(
                columns[Columns.OBS],
                columns[Columns.LOSS_MASK],
                columns[Columns.ADVANTAGES],
                strict=True,
            ):
                uid, t, agent = int(uid), int(t), int(agent)
                if not valid:
                    assert advantage == 0.0
                    continue
                assert acts(uid, t, agent), (uid, t, agent)  # no row for an absent agent
                assert advantage == pytest.approx(reference[(uid, t)][0], abs=2e-4), (uid, t)
                seen[uid % 2].add((t, agent))
    # Both scripts were seen: a death at the last step before truncation (even uids),
    # an early death and every agent dying (odd uids), and the late arrival.
    assert (EPISODE_LENGTH - 1, 1) in seen[0] and (ARRIVAL, 2) in seen[0]
    assert (ALL_DIE_AT, 0) in seen[1] and (3, 1) not in seen[1]
