"""The batched rollout path of ``envs.batched.BatchedEnvRunner``.

RLlib's ``MultiAgentEnvRunner`` walks every world of a vector env through its
connectors and episode objects at every step. For a simulator that steps all of its
worlds in one call (VMAS), that per-world bookkeeping costs many times the simulation.
``ArrayRollout`` instead keeps a ``sample()`` call's data as ``(T, B, ...)`` arrays:

- one forward pass per step and module, over every world and every agent the module
  serves, then the actions sampled from the module's action distribution (as RLlib's
  ``GetActions``) and unsquashed or clipped for the env (``NormalizeAndClipActions``);
- worlds that end are reset in the arrays (``reset_worlds``) before the next step;
- at the end of the call, the RLlib ``MultiAgentEpisode`` chunks the learner connectors
  read are built once per (world, episode) piece (``blocks.episode_pieces``), with the
  global state and step rewards in every agent's infos as ``envs.adapter`` puts them;
  ``on_episode_end`` callbacks and the runner's episode metrics see them as RLlib's.

The path serves a runner whose env is an ``ArrayWorld`` and whose pipeline is RLlib's
default one; ``eligibility.array_rollout_refusal`` says why another runner samples as
RLlib does.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import (
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
    SAMPLE_TIMER,
    TIME_BETWEEN_SAMPLING,
    WEIGHTS_SEQ_NO,
)

from marllib_ext.envs.adapter import STATE_KEY, STEP_REWARDS_KEY
from marllib_ext.rllib_compat import env_runner_callbacks
from marllib_ext.rllib_compat.env_runners import (
    episode_from_agent_chunks,
    mark_sampling_done,
    metrics_episode_caches,
    needs_initial_reset,
    pause_cyclic_gc,
    runner_seed,
    set_episode_times,
    set_needs_initial_reset,
    time_after_sampling,
    weights_seq_no,
)
from marllib_ext.rollout.blocks import clip_actions, episode_pieces, unsquash_actions
from marllib_ext.rollout.eligibility import ArrayWorld


class ArrayRollout:
    """The state of a batched env runner's sampling between ``sample()`` calls: every
    world's current observations, and the id, length and start time of its episode."""

    def __init__(self, env_runner) -> None:
        self.runner = env_runner
        self.world: ArrayWorld = env_runner.env.world
        adapter = env_runner.env.envs[0]
        self.agents = sorted(self.world.agents)
        self.num_envs = self.world.num_envs
        mapping = env_runner.config.policy_mapping_fn
        probe = MultiAgentEpisode()
        self.module_of = {agent: mapping(agent, probe) for agent in self.agents}
        self.module_agents: dict[str, list[str]] = {}
        for agent in self.agents:
            self.module_agents.setdefault(self.module_of[agent], []).append(agent)
        self.observation_spaces = {a: adapter.get_observation_space(a) for a in self.agents}
        self.action_spaces = {a: adapter.get_action_space(a) for a in self.agents}
        self.random = np.random.default_rng(runner_seed(env_runner))
        self.observations: dict[str, np.ndarray] | None = None
        self.episode_ids: list[str] = []
        self.env_t = np.zeros(self.num_envs, dtype=np.int64)
        self.started = np.zeros(self.num_envs)  # perf_counter time each episode began
        self.last_rewards: list[dict[str, float]] = []  # rewards behind the current obs

    # ---- sampling ----------------------------------------------------------------------
    def reset(self) -> None:
        runner = self.runner
        seed = runner_seed(runner) if needs_initial_reset(runner) else None
        self.observations = self.world.reset_arrays(seed)
        set_needs_initial_reset(runner, False)
        self.episode_ids = [""] * self.num_envs
        self.last_rewards = [{}] * self.num_envs
        now = time.perf_counter()
        for world in range(self.num_envs):
            self._start_episode(world, now)
        _, ongoing = metrics_episode_caches(runner)
        ongoing.clear()  # chunks of episodes this reset dropped

    def sample(
        self, *, num_timesteps: int, explore: bool, random_actions: bool, force_reset: bool
    ) -> list[MultiAgentEpisode]:
        """At least ``num_timesteps`` env steps (every world's step counts), as episodes."""
        runner = self.runner
        previous = time_after_sampling(runner)
        if previous is not None:
            runner.metrics.log_value(TIME_BETWEEN_SAMPLING, time.perf_counter() - previous)
        runner.metrics.log_value(WEIGHTS_SEQ_NO, weights_seq_no(runner), window=1)
        with runner.metrics.log_time(SAMPLE_TIMER):
            if force_reset or self.observations is None or needs_initial_reset(runner):
                self.reset()
            horizon = max(1, -(-num_timesteps // self.num_envs))
            block = self._run(horizon, explore, random_actions)
            with pause_cyclic_gc():
                episodes = self._episodes(block)
            make_callback(
                "on_sample_end",
                callbacks_objects=env_runner_callbacks(runner),
                callbacks_functions=runner.config.callbacks_on_sample_end,
                kwargs=dict(env_runner=runner, metrics_logger=runner.metrics, samples=episodes),
            )
        mark_sampling_done(runner)
        return episodes

    def _act(self, observations: dict[str, np.ndarray], explore: bool, random_actions: bool):
        """Actions ``{agent: (B, ...)}`` and the model outputs to keep per agent."""
        if random_actions:
            return {a: self._random_actions(a) for a in self.agents}, {a: {} for a in self.agents}
        actions, outputs = {}, {}
        with torch.no_grad():
            for module_id, agents in self.module_agents.items():
                module = self.runner.module[module_id]
                rows = np.concatenate([observations[a] for a in agents])
                batch = {Columns.OBS: torch.from_numpy(rows)}
                if explore:
                    out = module.forward_exploration(batch)
                    dist_class = module.get_exploration_action_dist_cls()
                else:
                    out = module.forward_inference(batch)
                    dist_class = module.get_inference_action_dist_cls()
                if Columns.ACTIONS not in out:
                    dist = dist_class.from_logits(out[Columns.ACTION_DIST_INPUTS])
                    if not explore:
                        dist = dist.to_deterministic()
                    out[Columns.ACTIONS] = dist.sample()
                    if Columns.ACTION_LOGP not in out:
                        out[Columns.ACTION_LOGP] = dist.logp(out[Columns.ACTIONS])
                columns = {k: v.numpy() for k, v in out.items() if isinstance(v, torch.Tensor)}
                for index, agent in enumerate(agents):
                    rows = slice(index * self.num_envs, (index + 1) * self.num_envs)
                    actions[agent] = columns[Columns.ACTIONS][rows]
                    outputs[agent] = {
                        k: v[rows] for k, v in columns.items() if k != Columns.ACTIONS
                    }
        return actions, outputs

    def _random_actions(self, agent: str) -> np.ndarray:
        space = self.action_spaces[agent]
        if isinstance(space, gym.spaces.Discrete):
            return space.start + self.random.integers(space.n, size=self.num_envs)
        if isinstance(space, gym.spaces.Box):
            low = np.where(np.isfinite(space.low), space.low, -1.0)
            high = np.where(np.isfinite(space.high), space.high, 1.0)
            shape = (self.num_envs, *space.shape)
            return self.random.uniform(low, high, shape).astype(space.dtype)
        raise TypeError(f"random actions for a {type(space).__name__} action space")

    def _env_actions(self, actions: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        config = self.runner.config
        env_actions = {}
        change = config.normalize_actions or config.clip_actions
        for agent, action in actions.items():
            space = self.action_spaces[agent]
            if isinstance(space, gym.spaces.Box) and change:
                if config.normalize_actions and space.is_bounded():
                    action = unsquash_actions(action, space.low, space.high)
                else:
                    action = clip_actions(action, space.low, space.high)
                action = action.astype(space.dtype, copy=False)
            env_actions[agent] = action
        return env_actions

    def _run(self, horizon: int, explore: bool, random_actions: bool) -> dict[str, Any]:
        """``horizon`` steps of every world, as ``(T, B, ...)`` arrays."""
        observations = self.observations
        block: dict[str, Any] = {
            "first": {a: observations[a] for a in self.agents},
            "next": [], "actions": [], "outputs": [], "rewards": [], "reset": [],
            "terminated": np.zeros((horizon, self.num_envs), bool),
            "truncated": np.zeros((horizon, self.num_envs), bool),
            "times": np.zeros(horizon),
        }  # fmt: skip
        for t in range(horizon):
            actions, outputs = self._act(observations, explore, random_actions)
            next_obs, rewards, terminated, truncated = self.world.step_arrays(
                self._env_actions(actions)
            )
            ended = terminated | truncated
            block["next"].append(next_obs)
            block["actions"].append(actions)
            block["outputs"].append(outputs)
            block["rewards"].append(rewards)
            block["terminated"][t], block["truncated"][t] = terminated, truncated
            block["times"][t] = time.perf_counter()
            reset_obs = None
            if ended.any():
                reset_obs = self.world.reset_worlds(np.flatnonzero(ended))
                observations = {
                    a: np.where(ended[:, None], reset_obs[a], next_obs[a]) for a in self.agents
                }
            else:
                observations = next_obs
            block["reset"].append(reset_obs)
        self.observations = observations
        return block

    # ---- episodes ----------------------------------------------------------------------
    def _start_episode(self, world: int, began: float) -> None:
        self.episode_ids[world] = MultiAgentEpisode().id_
        self.env_t[world] = 0
        self.started[world] = began
        self.last_rewards[world] = {}

    def _stacked(self, block: dict[str, Any]) -> dict[str, Any]:
        """The block's per-step lists as ``(T, B, ...)`` arrays."""
        agents = self.agents
        next_obs = {a: np.stack([step[a] for step in block["next"]]) for a in agents}
        return {
            "next": next_obs,
            "state": np.concatenate([next_obs[a] for a in agents], axis=-1),
            "actions": {a: np.stack([step[a] for step in block["actions"]]) for a in agents},
            "rewards": np.stack(
                [np.stack([step[a] for a in agents], axis=-1) for step in block["rewards"]]
            ),
            "outputs": {
                a: {
                    key: np.stack([step[a][key] for step in block["outputs"]])
                    for key in block["outputs"][0][a]
                }
                for a in agents
            },
        }

    def _episodes(self, block: dict[str, Any]) -> list[MultiAgentEpisode]:
        runner = self.runner
        agents, horizon = self.agents, len(block["next"])
        arrays = self._stacked(block)
        ended = block["terminated"] | block["truncated"]
        seq_no = weights_seq_no(runner)
        done_cache, ongoing_cache = metrics_episode_caches(runner)
        done_episodes, ongoing_episodes = [], []
        # Every step's rewards as the adapter reports them in the infos: {agent: reward}.
        step_rewards = [
            [dict(zip(agents, row, strict=True)) for row in step]
            for step in arrays["rewards"].tolist()
        ]
        for world, start, stop, done in zip(*episode_pieces(ended), strict=True):
            if start == 0:  # the world's running episode goes on
                first, first_rewards = block["first"], self.last_rewards[world]
                episode_id, env_t_started = self.episode_ids[world], int(self.env_t[world])
            else:  # an episode that began in this block
                first, first_rewards = block["reset"][start - 1], {}
                episode_id, env_t_started = MultiAgentEpisode().id_, 0
            first_state = np.concatenate([first[a][world] for a in agents])
            states = arrays["state"][start:stop, world]
            rewards = [first_rewards] + [step_rewards[t][world] for t in range(start, stop)]
            terminated = done and bool(block["terminated"][stop - 1, world])
            truncated = done and not terminated
            agent_episodes = {}
            for index, agent in enumerate(agents):
                outputs = {k: v[start:stop, world] for k, v in arrays["outputs"][agent].items()}
                outputs[WEIGHTS_SEQ_NO] = np.full(stop - start, seq_no)
                agent_episodes[agent] = SingleAgentEpisode(
                    agent_id=agent,
                    module_id=self.module_of[agent],
                    multi_agent_episode_id=episode_id,
                    observations=np.concatenate(
                        [first[agent][world][None], arrays["next"][agent][start:stop, world]]
                    ),
                    actions=arrays["actions"][agent][start:stop, world],
                    rewards=arrays["rewards"][start:stop, world, index],
                    infos=[
                        {STATE_KEY: state, STEP_REWARDS_KEY: reward}
                        for state, reward in zip([first_state, *states], rewards, strict=True)
                    ],
                    extra_model_outputs=outputs,
                    terminated=terminated,
                    truncated=truncated,
                    t_started=env_t_started,
                    len_lookback_buffer=0,
                )
            episode = episode_from_agent_chunks(
                id_=episode_id,
                agent_episodes=agent_episodes,
                env_t_started=env_t_started,
                terminated=terminated,
                truncated=truncated,
                agent_module_ids=self.module_of,
                agent_to_module_mapping_fn=runner.config.policy_mapping_fn,
            )
            began = self.started[world] if start == 0 else block["times"][start - 1]
            set_episode_times(episode, float(began), float(block["times"][stop - 1]))
            if done:
                make_callback(
                    "on_episode_end",
                    callbacks_objects=env_runner_callbacks(runner),
                    callbacks_functions=runner.config.callbacks_on_episode_end,
                    kwargs=dict(
                        episode=episode,
                        env_runner=runner,
                        metrics_logger=runner.metrics,
                        env=runner.env.unwrapped,
                        rl_module=runner.module,
                        env_index=int(world),
                        prev_episode_chunks=ongoing_cache[episode.id_],
                    ),
                )
                done_episodes.append(episode)
                if stop == horizon:  # the world's next episode starts the next call
                    self._start_episode(world, block["times"][stop - 1])
            else:
                ongoing_cache[episode.id_].append(episode)
                ongoing_episodes.append(episode)
                # The world's running episode continues in the next call.
                self.episode_ids[world] = episode.id_
                self.env_t[world] = episode.env_t
                self.started[world] = began
                self.last_rewards[world] = rewards[-1]
        self._log_counts(horizon, int(ended.sum()))
        done_cache.extend(done_episodes)
        return done_episodes + ongoing_episodes

    def _log_counts(self, horizon: int, num_episodes: int) -> None:
        """The env runner's step and episode counters for ``horizon`` steps of all worlds."""
        metrics = self.runner.metrics
        env_steps = horizon * self.num_envs
        metrics.log_value(NUM_ENV_STEPS_SAMPLED, env_steps, reduce="sum")
        metrics.log_value(
            NUM_ENV_STEPS_SAMPLED_LIFETIME, env_steps, reduce="lifetime_sum", with_throughput=True
        )
        if num_episodes:
            metrics.log_value(NUM_EPISODES, num_episodes, reduce="sum")
            metrics.log_value(NUM_EPISODES_LIFETIME, num_episodes, reduce="lifetime_sum")
        for agent in self.agents:
            module_id = self.module_of[agent]
            metrics.log_value((NUM_AGENT_STEPS_SAMPLED, agent), env_steps, reduce="sum")
            metrics.log_value(
                (NUM_AGENT_STEPS_SAMPLED_LIFETIME, agent), env_steps, reduce="lifetime_sum"
            )
            metrics.log_value((NUM_MODULE_STEPS_SAMPLED, module_id), env_steps, reduce="sum")
            metrics.log_value(
                (NUM_MODULE_STEPS_SAMPLED_LIFETIME, module_id), env_steps, reduce="lifetime_sum"
            )
