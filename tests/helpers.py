"""Test envs shared by several test modules."""

import itertools
import os

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

from marllib_ext.configs import ENV_CONFIG_DIR, load_yaml
from marllib_ext.envs.toy import CoordinationEnv

# Envs shipped in configs/envs/*.yaml (tests register more under test:/user: names).
BUILTIN_ENVS = sorted(
    f"{path.stem}:{scenario}"
    for path in ENV_CONFIG_DIR.glob("*.yaml")
    for scenario in load_yaml(path)
)
EPISODE_LENGTH = 7
N_AGENTS = 3


def reward_of(uid: int, t: int, agent: int) -> float:
    return ((uid * 31 + t * 7 + agent * 3) % 11) / 10.0 - 0.5


_COUNTER_INSTANCES = itertools.count()


class CounterEnv(ParallelEnv):
    """obs = (episode uid, step, agent index); odd uids terminate, even ones truncate.

    uids are unique within a process (tests key their references by uid): each instance
    numbers its episodes from its own base, and stays exact in float32."""

    metadata = {"name": "counter_v0"}

    def __init__(self):
        self.possible_agents = [f"agent_{i}" for i in range(N_AGENTS)]
        self.agents = []
        self._uids = itertools.count(1 + 50_000 * (next(_COUNTER_INSTANCES) % 300))

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self):
        return {
            a: np.array([self.uid, self.t, i], np.float32)
            for i, a in enumerate(self.possible_agents)
        }

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.uid, self.t = next(self._uids), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        rewards = {a: reward_of(self.uid, self.t, i) for i, a in enumerate(self.agents)}
        self.t += 1
        done = self.t >= EPISODE_LENGTH
        terminated = done and self.uid % 2 == 1
        obs = self._obs()
        terms = {a: terminated for a in self.agents}
        truncs = {a: done and not terminated for a in self.agents}
        infos = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, infos


class TwoTeamCounterEnv(CounterEnv):
    """CounterEnv with a blue team of one agent and a red team of two (agent index i,
    the third observation entry, is the agent's place in sorted id order)."""

    def __init__(self):
        super().__init__()
        self.possible_agents = ["blue_0", "red_0", "red_1"]


def register_test_envs() -> None:
    """The counter envs several test modules train on (``tests/conftest.py`` registers
    them once per session)."""
    from marllib_ext.envs import register_env

    register_env("test:counter", CounterEnv, state_source="observations")
    register_env(
        "test:two_teams",
        TwoTeamCounterEnv,
        team_prefix=["blue_", "red_"],
        all_agents_one_policy=True,
        state_source="observations",
    )


def cost_of(uid: int, t: int, agent: int) -> float:
    """Per-agent cost of step t: varies with t and agent; an episode's team cost is
    sum_t sum_i (0.1 (t + 1) + 0.01 i) = 8.61 for every uid."""
    return 0.1 * (t + 1) + 0.01 * agent


COUNTER_EPISODE_COST = sum(cost_of(0, t, i) for t in range(EPISODE_LENGTH) for i in range(N_AGENTS))


class CostCounterEnv(CounterEnv):
    """CounterEnv whose agents report ``info["cost"] = cost_of(uid, t, agent)`` for the
    action taken at step t (delivered with the next observation)."""

    def step(self, actions):
        t = self.t
        obs, rewards, terms, truncs, infos = super().step(actions)
        for i, agent in enumerate(self.possible_agents):
            infos[agent] = {"cost": cost_of(self.uid, t, i)}
        return obs, rewards, terms, truncs, infos


class CrashOnceEnv(CoordinationEnv):
    """Coordination game whose process dies once, at step ``crash_at`` of its life,
    the first time any instance gets there (``marker`` file records it)."""

    def __init__(self, marker: str, crash_at: int = 150, **kwargs):
        super().__init__(**kwargs)
        self.marker, self.crash_at, self.steps = marker, crash_at, 0

    def step(self, actions):
        self.steps += 1
        if self.steps >= self.crash_at and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write("crashed\n")
            os._exit(1)  # the env runner process dies, as on a segfault or OOM kill
        return super().step(actions)


def reads_episodes(**kwargs) -> None:
    """An ``on_sample_end`` callback: its runner hands episode chunks, not blocks."""


def counter_config(algo_name, env_name, learner_class, share_policy="all", **overrides):
    """A tiny in-process config over CounterEnv-style envs whose 7-step episodes are cut
    by 5-step fragments (continuation chunks appear), with a recording learner; the
    runner hands episode chunks (their learner connector reads them as blocks)."""
    from marllib_ext import algos

    settings = {
        "hyperparam_source": "toy",
        "num_env_runners": 0,
        "num_envs_per_env_runner": 2,
        "train_batch_size": 48,
        "minibatch_size": 48,
        "num_epochs": 1,
        **overrides,
    }
    config = algos.get(algo_name, **settings).rllib_config(
        env_name, share_policy=share_policy, seed=0
    )
    config = config.env_runners(rollout_fragment_length=5).learners(learner_class=learner_class)
    return config.callbacks(on_sample_end=reads_episodes)


class CostTradeoffEnv(ParallelEnv):
    """Two agents, 10 steps, constant observation. Action 0: reward 1 and cost 1;
    action 1: reward 0.5 and no cost. Reward-greedy teams pay a team cost of 20 per
    episode; a random team about 10; a cost-free team 0."""

    metadata = {"name": "cost_tradeoff_v0"}
    LENGTH = 10

    def __init__(self):
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents = []

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {a: np.ones(1, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        done = self.t >= self.LENGTH
        rewards = {a: 1.0 if actions[a] == 0 else 0.5 for a in self.agents}
        infos = {a: {"cost": 1.0 if actions[a] == 0 else 0.0} for a in self.agents}
        obs = {a: np.ones(1, np.float32) for a in self.agents}
        terms = dict.fromkeys(self.agents, False)
        truncs = dict.fromkeys(self.agents, done)
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, infos


def sgd_overrides(name, minibatch_size, num_epochs=None):
    """Overrides of the minibatch size (and epochs) of ``name``'s SGD under the keys its
    schedule reads (``critic_minibatch_size`` on the trust-region family); ``null``
    where the algorithm's defaults take whole-batch steps (A2C, COMA, IPG)."""
    from marllib_ext.algos.ppo.schedule import rllib_phase
    from marllib_ext.algos.registry import ALGORITHMS

    phase = rllib_phase(ALGORITHMS[name].schedule)
    whole_batch = getattr(ALGORITHMS[name].settings("toy"), phase.minibatch_size) is None
    values = {phase.minibatch_size: None if whole_batch else minibatch_size}
    if num_epochs is not None:
        values[phase.epochs] = num_epochs
    return values


class CapturesTrainBatch:
    """Learner mixin for a phased learner (list it first): keeps the batch of the last
    ``update`` in ``last_train_batch``."""

    last_train_batch = None

    def train_batch(self, training_data):
        batch = super().train_batch(training_data)
        self.last_train_batch = batch
        return batch
