"""Agents that arrive, die and come back at random steps, sampled through a real env
runner with fragments that cut episodes at every offset: every agent row's advantage
and value target against a reference computed from the observations alone.

Per episode (uid in every observation), a generator seeded by the uid draws the
episode length and, per agent, the step it is first observed and the step it acts
last; ``agent_0`` plays from the reset to the end (so an episode always has a
player). Odd uids end terminated (every agent dies at the last step), even ones
truncated."""

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv
from ray.rllib.core.columns import Columns

from marllib_ext.algos.ppo.learners import JointCriticPPOLearner
from marllib_ext.envs import register_env
from marllib_ext.postprocessing import JointAdvantageConnector
from tests.helpers import counter_config, reward_of
from tests.team_advantages import GAMMA, LAMBDA, recording, reference_present_agents

AGENTS = ("agent_0", "agent_1", "agent_2")
RECORDED = []


class RecordingLearner(JointCriticPPOLearner):
    advantage_connector_class = recording(JointAdvantageConnector, RECORDED)


def script(uid):
    """``(length, {agent index: (first, last)})``: agent i acts at steps first..last."""
    rng = np.random.default_rng(uid)
    length = int(rng.integers(3, 10))
    spans = {0: (0, length - 1)}
    for agent in (1, 2):
        first = int(rng.integers(0, length))
        spans[agent] = (first, int(rng.integers(first, length)))
    return length, spans


def acts(uid, t, agent):
    length, spans = script(uid)
    first, last = spans[agent]
    return first <= t <= last


class RandomPresenceEnv(ParallelEnv):
    metadata = {"name": "random_presence_v0"}

    def __init__(self):
        self.possible_agents = list(AGENTS)
        self.agents = []
        self.uids = iter(range(1, 10**6))

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self, indices):
        return {AGENTS[i]: np.array([self.uid, self.t, i], np.float32) for i in indices}

    def reset(self, seed=None, options=None):
        self.uid, self.t = next(self.uids), 0
        self.length, self.spans = script(self.uid)
        present = [i for i in range(3) if self.spans[i][0] == 0]
        self.agents = [AGENTS[i] for i in present]
        return self._obs(present), {AGENTS[i]: {} for i in present}

    def step(self, actions):
        acting = [AGENTS.index(a) for a in self.agents]
        assert set(actions) == set(self.agents), (actions, self.agents)
        rewards = {AGENTS[i]: reward_of(self.uid, self.t, i) for i in acting}
        self.t += 1
        ended = self.t >= self.length
        terminated = ended and self.uid % 2 == 1
        dying = {i for i in acting if self.spans[i][1] == self.t - 1 and (i != 0 or terminated)}
        arriving = [i for i in range(3) if self.spans[i][0] == self.t and not ended]
        observed = acting + arriving
        rewards.update({AGENTS[i]: 0.0 for i in arriving})
        still = [i for i in acting if i not in dying] + arriving
        self.agents = [] if ended else [AGENTS[i] for i in sorted(still)]
        return (
            self._obs(observed),
            rewards,
            {AGENTS[i]: i in dying for i in observed},
            {AGENTS[i]: ended and i not in dying for i in observed},
            {AGENTS[i]: {} for i in observed},
        )


register_env("test:random_presence", RandomPresenceEnv, state_source="observations")


@pytest.mark.parametrize("fragment", [2, 3, 4, 5])
def test_every_agent_row_gets_its_team_step_advantage_and_target(ray_session, fragment):
    RECORDED.clear()
    config = counter_config(
        "mappo",
        "test:random_presence",
        RecordingLearner,
        "individual",
        gamma=GAMMA,
        lambda_=LAMBDA,
    )
    config.environment(disable_env_checking=True)  # its agents differ per episode
    algorithm = config.env_runners(rollout_fragment_length=fragment).build_algo()
    try:
        for _ in range(3):
            algorithm.train()
    finally:
        algorithm.stop()

    arrivals = set()
    for record in RECORDED:
        expected = reference_present_agents(record, acts, lambda uid: script(uid)[0] - 1)
        for columns in record["modules"].values():
            for (uid, t, agent), valid, advantage, target in zip(
                columns[Columns.OBS],
                columns[Columns.LOSS_MASK],
                columns[Columns.ADVANTAGES],
                columns[Columns.VALUE_TARGETS],
                strict=True,
            ):
                uid, t, agent = int(uid), int(t), int(agent)
                if not valid:
                    continue
                assert acts(uid, t, agent), (uid, t, agent)
                assert advantage == pytest.approx(expected[(uid, t)][0], abs=2e-4), (uid, t)
                assert target == pytest.approx(expected[(uid, t)][1], abs=2e-4), (uid, t)
                if t > 0 and t == script(uid)[1][agent][0]:
                    arrivals.add(t)
    assert len(arrivals) >= 3  # agents first observed at several steps
