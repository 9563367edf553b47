"""Google Research Football (``grf:<scenario>``) with MARLlib's settings, as a PettingZoo
ParallelEnv.

- **Players.** The agents ``agent_0..agent_{n-1}`` control the left team's first ``n``
  field players, ``n`` per scenario as MARLlib and the MAPPO paper (``GRF_SCENARIOS``;
  env arg ``players`` overrides). The built-in AI plays the rest, the keeper included.
- **Observations and actions.** ``simple115v2``: 115 floats per player (every
  player's position and direction, the ball, who owns it, the active player, the game
  mode); the 19 default actions. The critics get every agent's observation.
- **Rewards.** ``scoring,checkpoints``: +1 for a goal (-1 conceded) to every agent,
  plus 0.1 for each of the 10 checkpoint zones towards the goal an agent first enters
  with the ball.
- **Episode ends.** An academy ends on a goal, the ball out of play or a change of
  possession (terminated); at the scenario's ``game_duration`` it is truncated
  (bootstrapped). ``success`` in the last step's infos: the left team scored more than
  it conceded, so ``evaluate``'s success rate is the scoring rate.
- **Seeds.** ``reset(seed=s)`` seeds a generator that draws each episode's game-engine
  seed, so a run replays from its seed.

Needs ``gfootball`` (a source build; docs/envs.md) with ``gym==0.25.2``.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv

from marllib_ext.envs.adapter import SUCCESS_KEY
from marllib_ext.envs.spec import EnvSpec, PolicyMappingInfo
from marllib_ext.errors import ConfigError

# Scenario -> left players the agents control: MARLlib's ``ally_num_dict`` for its
# cooperative academies, the MAPPO paper's for the corner (every field player), one for
# the single-attacker academies, the four field players of 5_vs_5.
GRF_SCENARIOS = {
    "academy_empty_goal_close": 1,
    "academy_empty_goal": 1,
    "academy_run_to_score": 1,
    "academy_run_to_score_with_keeper": 1,
    "academy_pass_and_shoot_with_keeper": 2,
    "academy_run_pass_and_shoot_with_keeper": 2,
    "academy_3_vs_1_with_keeper": 3,
    "academy_counterattack_easy": 4,
    "academy_counterattack_hard": 4,
    "academy_corner": 10,
    "academy_single_goal_versus_lazy": 11,
    "5_vs_5": 4,
}
INSTALL_HINT = "docs/envs.md, 'Google Research Football' (a source build of gfootball 2.10.2)"
ENGINE_SEED_KEY = "game_engine_random_seed"


class GRFParallelEnv(ParallelEnv):
    """One GRF game of ``scenario`` with ``players`` controlled left players."""

    metadata = {"name": "grf"}

    def __init__(
        self,
        scenario: str,
        players: int | None = None,
        representation: str = "simple115v2",
        rewards: str = "scoring,checkpoints",
        **options: Any,
    ) -> None:
        if scenario not in GRF_SCENARIOS:
            raise ConfigError(
                f"unknown GRF scenario {scenario!r}; scenarios: {sorted(GRF_SCENARIOS)}"
            )
        try:
            import gfootball.env as football_env
        except ImportError as e:
            raise ConfigError(f"grf:{scenario} needs gfootball ({INSTALL_HINT}): {e}") from e
        self.scenario = scenario
        self.n_players = int(players if players is not None else GRF_SCENARIOS[scenario])
        if self.n_players < 1:
            raise ConfigError(f"env 'grf:{scenario}': players must be >= 1, got {players}")
        options = {"render": False, "write_video": False, "dump_frequency": 0, **options}
        try:
            with warnings.catch_warnings():
                # gym 0.25's notice about its old step API, which gfootball uses.
                warnings.filterwarnings("ignore", message=".*old step API.*")
                self.env = football_env.create_environment(
                    env_name=scenario,
                    representation=representation,
                    rewards=rewards,
                    number_of_left_players_agent_controls=self.n_players,
                    **options,
                )
        except (TypeError, ValueError, AssertionError) as e:
            raise ConfigError(f"env 'grf:{scenario}' rejected its arguments: {e}") from e
        space = self.env.observation_space
        low = np.asarray(space.low, np.float32).reshape(self.n_players, -1)[0]
        high = np.asarray(space.high, np.float32).reshape(self.n_players, -1)[0]
        observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        nvec = getattr(self.env.action_space, "nvec", None)
        n_actions = int(nvec[0]) if nvec is not None else int(self.env.action_space.n)
        self.possible_agents = [f"agent_{i}" for i in range(self.n_players)]
        self.agents: list[str] = []
        self._observation_space = observation_space
        self._action_space = gym.spaces.Discrete(n_actions)
        self._seeds = np.random.default_rng()
        self._steps = 0
        self._limit = 0
        self._goal_difference = 0

    def observation_space(self, agent: str) -> gym.Space:
        return self._observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self._action_space

    @property
    def game_duration(self) -> int:
        """The scenario's step limit (its ``game_duration``)."""
        return int(self.env.unwrapped._config.ScenarioConfig().game_duration)

    def _per_agent(self, observations) -> dict[str, np.ndarray]:
        rows = np.asarray(observations, np.float32).reshape(self.n_players, -1)
        return dict(zip(self.possible_agents, rows, strict=True))

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        # The engine draws its own seed per episode unless the config names one.
        self.env.unwrapped._config.update(
            {ENGINE_SEED_KEY: int(self._seeds.integers(0, 2_000_000_000))}
        )
        observations = self.env.reset()
        self._limit = self.game_duration
        self.agents = list(self.possible_agents)
        self._steps = 0
        self._goal_difference = 0
        return self._per_agent(observations), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        joint = [int(actions[a]) for a in self.possible_agents]
        observations, rewards, done, info = self.env.step(joint)
        self._steps += 1
        scored = int(info.get("score_reward", 0))
        self._goal_difference += scored
        truncated = bool(done) and scored == 0 and self._steps >= self._limit
        terminated = bool(done) and not truncated
        rewards = np.broadcast_to(np.asarray(rewards, np.float32), (self.n_players,))
        agents = list(self.agents)
        infos = {a: {} for a in agents}
        if done:
            self.agents = []
            for a in agents:
                infos[a][SUCCESS_KEY] = self._goal_difference > 0
        return (
            self._per_agent(observations),
            {a: float(r) for a, r in zip(self.possible_agents, rewards, strict=True)},
            dict.fromkeys(agents, terminated),
            dict.fromkeys(agents, truncated),
            infos,
        )

    def close(self) -> None:
        self.env.close()


def grf_env(scenario: str, **kwargs: Any) -> GRFParallelEnv:
    """One GRF game of ``scenario`` (``kwargs``: ``players``, ``representation``,
    ``rewards`` or any ``gfootball.env.create_environment`` argument)."""
    return GRFParallelEnv(scenario, **kwargs)


def grf_spec(name: str) -> EnvSpec:
    """``grf:<scenario>``: one cooperative team of the controlled left players sharing a
    policy by default, the critics' state from every agent's observation, the episode
    limit the scenario's ``game_duration`` (read from a built game)."""
    scenario = name.partition(":")[2]
    env = GRFParallelEnv(scenario)  # refuses an unknown scenario by name
    limit = env.game_duration
    env.close()
    return EnvSpec(
        name=name,
        creator=functools.partial(grf_env, scenario),
        policy_mapping=PolicyMappingInfo(
            team_prefix=("agent_",),
            all_agents_one_policy=True,
            one_agent_one_policy=True,
            description=f"Google Research Football {scenario}, simple115v2",
        ),
        hyperparam_source="grf",
        state_source="observations",
        max_episode_steps=limit,
    )
