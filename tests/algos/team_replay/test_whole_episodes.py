"""Team replay stores long and short episodes in their true proportion: it samples
through the whole-episode runner, not RLlib's ``complete_episodes`` sampler, which drops
the episodes still running (the long ones) when the first ones end."""

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from marllib_ext import algos
from marllib_ext.envs import register_env
from marllib_ext.rollout.team_episodes import TeamEpisodeEnvRunner
from marllib_ext.rollout.whole_episodes import WholeEpisodeEnvRunner

LONG, SHORT = 24, 1


class RandomLength(ParallelEnv):
    """Two agents; each episode lasts ``LONG`` or ``SHORT`` steps, drawn at reset."""

    metadata = {"name": "random_length_v0"}

    def __init__(self):
        self.possible_agents = ["agent_0", "agent_1"]
        self.rng = np.random.default_rng()

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self):
        left = np.float32(1.0 - self.t / self.length)
        return {a: np.array([left, self.length == LONG], np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t, self.length = 0, LONG if self.rng.random() < 0.5 else SHORT
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        done = self.t >= self.length
        obs = self._obs()
        rewards = {a: 0.0 for a in self.agents}
        terminated = {a: done for a in self.agents}
        truncated = {a: False for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminated, truncated, {a: {} for a in obs}


def test_team_replay_stores_long_episodes_in_their_true_share(ray_session):
    register_env("test:random_length", RandomLength)
    config = algos.iql(
        num_envs_per_env_runner=8, buffer_size=2000, batch_episode=8, learning_starts=10_000
    ).rllib_config("test:random_length", seed=0)
    assert issubclass(config.env_runner_cls, WholeEpisodeEnvRunner)
    assert config.env_runner_cls is TeamEpisodeEnvRunner
    algorithm = config.build_algo()
    try:
        for _ in range(40):
            algorithm.training_step()
        lengths = algorithm.store.lengths[: len(algorithm.store)]
        sampled = algorithm.metrics.peek(("env_runners", "num_env_steps_sampled_lifetime"))
    finally:
        algorithm.stop()
    assert set(lengths.tolist()) <= {LONG, SHORT}
    share = float(np.mean(lengths == LONG))
    # Half the episodes are long; 1 - 3 standard errors of a fair draw is the floor
    # (RLlib's sampler stored none of 320: 8 short episodes always ended first).
    assert len(lengths) >= 320 and share > 0.5 - 3 * np.sqrt(0.25 / len(lengths))
    # Every sampled env step reached the store, up to the chunks still running.
    assert sampled - 8 * LONG <= int(lengths.sum()) <= sampled
