"""envs.batched: one batched simulator behind RLlib's vector multi-agent env, checked on a
counting world whose every value is known by hand."""

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv

from marllib_ext.envs.adapter import ParallelEnvAdapter
from marllib_ext.envs.batched import BatchedVectorEnv

AGENTS = ["agent_0", "agent_1"]


class CountingWorld:
    """``num_envs`` worlds; world i counts its steps and ends after ``lengths[i]`` of
    them. Observation: [world index, step count]; reward of agent k: action + k."""

    def __init__(self, lengths):
        self.num_envs = len(lengths)
        self.lengths = list(lengths)
        self.t = np.zeros(self.num_envs, int)
        self.batched_steps = 0
        self.pending_reset, self.pending_step = {}, {}
        self.slots = [CountingSlot(self, i) for i in range(self.num_envs)]

    def _obs(self, i):
        return {a: np.array([i, self.t[i]], np.float32) for a in AGENTS}

    def reset(self, seed=None):
        self.t[:] = 0
        self.pending_reset = {
            i: (self._obs(i), {a: {} for a in AGENTS}) for i in range(self.num_envs)
        }

    def reset_worlds(self, indices):
        for index in indices:
            self.t[index] = 0
            self.pending_reset[index] = (self._obs(index), {a: {} for a in AGENTS})

    def step(self, actions):
        self.batched_steps += 1
        for i, acts in enumerate(actions):
            self.t[i] += 1
            done = bool(self.t[i] >= self.lengths[i])
            self.pending_step[i] = (
                self._obs(i),
                {a: float(acts.get(a, -100)) + k for k, a in enumerate(AGENTS)},
                {a: done for a in AGENTS},
                {a: False for a in AGENTS},
                {a: {} for a in AGENTS},
            )

    def close(self):
        pass


class CountingSlot(ParallelEnv):
    def __init__(self, world, index):
        self.world, self.index = world, index
        self.possible_agents = list(AGENTS)
        self.agents = list(AGENTS)

    def observation_space(self, agent):
        return gym.spaces.Box(0, 1000, (2,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        if self.index not in self.world.pending_reset:
            self.world.reset_worlds([self.index])
        self.agents = list(AGENTS)
        return self.world.pending_reset.pop(self.index)

    def step(self, actions):
        result = self.world.pending_step.pop(self.index)
        if any(result[2].values()):
            self.agents = []
        return result


def test_one_batched_call_per_vector_step_and_next_step_autoreset():
    world = CountingWorld([2, 3])
    env = BatchedVectorEnv(world, lambda slot: ParallelEnvAdapter(slot, action_mask="none"))
    observations, infos = env.reset(seed=0)
    assert [o["agent_0"].tolist() for o in observations] == [[0, 0], [1, 0]]
    assert "state" in infos[0]["agent_0"]  # each slot went through the adapter

    acts = [{"agent_0": 1, "agent_1": 2}, {"agent_0": 0, "agent_1": 1}]
    _, rewards, terminateds, _, _ = env.step(acts)
    assert rewards == [{"agent_0": 1.0, "agent_1": 3.0}, {"agent_0": 0.0, "agent_1": 2.0}]
    assert [t["__all__"] for t in terminateds] == [False, False]

    observations, _, terminateds, _, _ = env.step(acts)
    assert [t["__all__"] for t in terminateds] == [True, False]  # world 0 ends at t=2
    assert observations[0]["agent_0"].tolist() == [0, 2]

    # Next step: world 0 (no actions) comes back reset with zero rewards, world 1 ends.
    observations, rewards, terminateds, truncateds, _ = env.step([{}, acts[1]])
    assert observations[0]["agent_0"].tolist() == [0, 0]
    assert rewards[0] == {"agent_0": 0.0, "agent_1": 0.0}
    assert terminateds[0]["__all__"] is False and truncateds[0]["__all__"] is False
    assert [t["__all__"] for t in terminateds] == [False, True]
    assert observations[1]["agent_0"].tolist() == [1, 3]

    observations, rewards, *_ = env.step([acts[0], {}])
    assert observations[0]["agent_0"].tolist() == [0, 1]
    assert rewards[0] == {"agent_0": 1.0, "agent_1": 3.0}
    assert observations[1]["agent_0"].tolist() == [1, 0]
    assert world.batched_steps == 4


def test_spaces_are_the_single_envs():
    world = CountingWorld([2, 2, 2])
    env = BatchedVectorEnv(world, lambda slot: ParallelEnvAdapter(slot, action_mask="none"))
    assert env.num_envs == 3 and len(env.envs) == 3
    assert env.single_action_spaces["agent_1"] == gym.spaces.Discrete(3)
    assert set(env.single_observation_space.spaces) == set(AGENTS)
