"""The batched rollout path of ``envs.batched.BatchedEnvRunner``.

RLlib's ``MultiAgentEnvRunner`` walks every world of a vector env through its
connectors and episode objects at every step. For a simulator that steps all of its
worlds in one call (VMAS, SMAX), that per-world bookkeeping costs many times the simulation.
``ArrayRollout`` instead keeps a ``sample()`` call's data as ``(T, B, ...)`` arrays:

- one forward pass per step and module, over every world and every agent the module
  serves, then the actions sampled from the module's action distribution (as RLlib's
  ``GetActions``) and unsquashed or clipped for the env (``NormalizeAndClipActions``);
  exploration reads the global env step ``t`` as RLlib's runner passes it (epsilon
  schedules); a recurrent module's state is carried per agent and world, and starts
  afresh where the world's episode starts;
- action masks go to the module with the observations; an agent that dies (a killed
  unit) stays in the arrays but leaves its episode;
- worlds that end are reset in the arrays (``reset_worlds``) before the next step;
- at the end of the call, the RLlib ``MultiAgentEpisode`` chunks the learner connectors
  read are built once per (world, episode) piece (``ops.rollout.episode_pieces``,
  ``chunks.build_chunk``), as ``envs.adapter`` would have recorded them;
  ``on_episode_end`` callbacks and the runner's episode metrics see them as RLlib's.

The path serves a runner whose env is an ``ArrayWorld`` and whose pipeline is RLlib's
default one; ``sampler.choose_sampler`` says why another runner samples as
RLlib does.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.utils.metrics import (
    SAMPLE_TIMER,
    TIME_BETWEEN_SAMPLING,
    WEIGHTS_SEQ_NO,
)

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY, log_contract_report
from marllib_ext.envs.arrays import ArrayWorld, WorldArrays
from marllib_ext.ops.rollout import episode_pieces
from marllib_ext.rllib_compat import env_runner_callbacks, env_to_module
from marllib_ext.rllib_compat.connectors import added_pieces
from marllib_ext.rllib_compat.env_runners import (
    callback_functions,
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
from marllib_ext.rollout.actions import env_actions, uniform_actions
from marllib_ext.rollout.blocks import RolloutBlock
from marllib_ext.rollout.chunks import SampledSteps, StepArrays, build_chunk
from marllib_ext.rollout.direct import (
    EpisodeTally,
    log_sample_counts,
    log_successes,
    rollout_block,
)
from marllib_ext.rollout.extensions import ExtensionChain, is_logged_by_array_form
from marllib_ext.rollout.recurrent import RecurrentStates


class ArrayRollout:
    """The state of a batched env runner's sampling between ``sample()`` calls: every
    world's current arrays and present agents, and the id, length and start time of its
    episode."""

    def __init__(self, env_runner, *, hands_blocks: bool) -> None:
        self.runner = env_runner
        # sample() returns one RolloutBlock (else episode chunks), fixed with the
        # runner's SamplerChoice.
        self.hands_blocks = hands_blocks
        self.world: ArrayWorld = env_runner.env.world
        adapter = env_runner.env.envs[0].unwrapped
        self.agents = sorted(self.world.agents)
        self.num_envs = self.world.num_envs
        mapping = env_runner.config.policy_mapping_fn
        probe = MultiAgentEpisode()
        self.module_of = {agent: mapping(agent, probe) for agent in self.agents}
        self.module_agents: dict[str, list[str]] = {}
        for agent in self.agents:
            self.module_agents.setdefault(self.module_of[agent], []).append(agent)
        self.action_spaces = {a: adapter.get_action_space(a) for a in self.agents}
        self.random = np.random.default_rng(runner_seed(env_runner))
        self.current: WorldArrays | None = None
        self.alive = np.ones((self.num_envs, len(self.agents)), bool)
        self.starting = np.ones(self.num_envs, bool)  # each world's episode starts now
        self.episode_ids: list[str] = []
        self.env_t = np.zeros(self.num_envs, dtype=np.int64)
        self.started = np.zeros(self.num_envs)  # perf_counter time each episode began
        self.last_rewards: list[dict[str, float]] = []  # rewards behind the current obs
        self.recurrent = RecurrentStates()  # recurrent modules' states between steps
        self.steps_this_call = 0  # env steps of every world so far in this sample() call
        self.tally = EpisodeTally(
            env_runner, self.agents, self.module_of, self.num_envs, team_of=adapter.team_of
        )
        # The algorithm's env-to-module connectors, in their array form.
        pieces = added_pieces(env_to_module(env_runner))
        for piece in pieces:
            if callable(getattr(piece, "bind_module", None)):
                piece.bind_module(env_runner.module)  # a signal's networks (RND)
        self.extensions = ExtensionChain(
            [piece.array_form(self.agents, self.num_envs) for piece in pieces], self.agents
        )

    # ---- sampling ----------------------------------------------------------------------
    def reset(self) -> None:
        runner = self.runner
        seed = runner_seed(runner) if needs_initial_reset(runner) else None
        every_world = np.arange(self.num_envs)
        self.current = self.extensions.restarted(self.world.reset_arrays(seed), every_world)
        set_needs_initial_reset(runner, False)
        self.alive[:] = True
        self.starting[:] = True
        self.recurrent.clear()
        self.episode_ids = [""] * self.num_envs
        self.last_rewards = [{}] * self.num_envs
        self.tally.reset()
        now = time.perf_counter()
        for world in range(self.num_envs):
            self._start_episode(world, now)
        _, ongoing = metrics_episode_caches(runner)
        ongoing.clear()  # chunks of episodes this reset dropped

    def sample(
        self,
        *,
        num_timesteps: int,
        explore: bool,
        random_actions: bool,
        force_reset: bool,
        as_block: bool = False,
    ) -> list[MultiAgentEpisode] | list[RolloutBlock]:
        """At least ``num_timesteps`` env steps (every world's step counts): as episode
        chunks, or as one ``RolloutBlock`` where the learner takes those or ``as_block``
        asks for one (a sampler that reads the arrays itself, e.g. team episodes)."""
        runner = self.runner
        previous = time_after_sampling(runner)
        if previous is not None:
            runner.metrics.log_value(TIME_BETWEEN_SAMPLING, time.perf_counter() - previous)
        runner.metrics.log_value(WEIGHTS_SEQ_NO, weights_seq_no(runner), window=1)
        with runner.metrics.log_time(SAMPLE_TIMER):
            if force_reset or self.current is None or needs_initial_reset(runner):
                self.reset()
            horizon = max(1, -(-num_timesteps // self.num_envs))
            block = self._run(horizon, explore, random_actions)
            if as_block:
                mark_sampling_done(runner)
                return [self._block(block)]
            if self.hands_blocks:
                mark_sampling_done(runner)
                # One block per data-parallel learner: RLlib hands each one out whole.
                return self._block(block).split(max(1, runner.config.num_learners or 0))
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

    def _module_input(self, arrays: WorldArrays, agents: list[str]) -> dict[str, Any]:
        rows = torch.from_numpy(np.concatenate([arrays.observations[a] for a in agents]))
        if arrays.action_masks is None:
            return {Columns.OBS: rows}
        masks = np.concatenate([arrays.action_masks[a] for a in agents]).astype(np.float32)
        return {Columns.OBS: {OBSERVATION_KEY: rows, ACTION_MASK_KEY: torch.from_numpy(masks)}}

    def global_env_steps(self) -> int:
        """The ``t`` exploration reads, as RLlib's ``MultiAgentEnvRunner`` computes it:
        this runner's lifetime env steps (set by the algorithm) plus this call's, times
        the number of runners."""
        runners = self.runner.config.num_env_runners or 1
        lifetime = self.runner.num_env_steps_sampled_lifetime
        return (lifetime // runners + self.steps_this_call) * runners

    def _act(
        self,
        arrays: WorldArrays,
        explore: bool,
        random_actions: bool,
        starting: np.ndarray | None = None,
    ):
        """Actions ``{agent: (B, ...)}`` and the model outputs to keep per agent;
        ``starting``: ``(B,)`` the worlds whose episode starts at this step (recurrent
        modules start from their initial state there)."""
        if random_actions:
            actions = {
                a: uniform_actions(
                    self.action_spaces[a],
                    self.num_envs,
                    self.random,
                    mask=None if arrays.action_masks is None else arrays.action_masks[a],
                )
                for a in self.agents
            }
            return actions, {a: {} for a in self.agents}
        if starting is None:
            starting = np.zeros(self.num_envs, bool)
        actions, outputs = {}, {}
        with torch.no_grad():
            for module_id, agents in self.module_agents.items():
                module = self.runner.module[module_id]
                batch = self._module_input(arrays, agents)
                recurrent = module.is_stateful()
                if recurrent:
                    rows = np.tile(starting, len(agents))
                    batch = self.recurrent.module_input(module_id, module, batch, rows)
                if explore:
                    out = module.forward_exploration(batch, t=self.global_env_steps())
                    dist_class = module.get_exploration_action_dist_cls()
                else:
                    out = module.forward_inference(batch)
                    dist_class = module.get_inference_action_dist_cls()
                if recurrent:
                    out = self.recurrent.module_output(module_id, out)
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

    def _run(self, horizon: int, explore: bool, random_actions: bool) -> SampledSteps:
        """``horizon`` steps of every world."""
        block = SampledSteps(
            agents=self.agents, first=self.current, steps=[], resets=[],
            alive=np.zeros((horizon, self.num_envs, len(self.agents)), bool),
            actions=[], outputs=[], times=np.zeros(horizon), acted=[],
            starts=np.zeros((horizon, self.num_envs), bool),
        )  # fmt: skip
        current, alive = self.current, self.alive
        self.steps_this_call = 0
        for t in range(horizon):
            block.alive[t] = alive
            block.starts[t] = self.starting
            block.acted.append(current)
            actions, outputs = self._act(current, explore, random_actions, self.starting)
            self.steps_this_call += self.num_envs
            step = self.world.step_arrays(
                env_actions(actions, self.action_spaces, self.runner.config)
            )
            ended = step.terminated | step.truncated
            self.starting = ended
            if self.extensions:
                step = self.extensions.stepped(step, outputs, alive, ended, self.runner.metrics)
            for key, report in step.reports or ():
                log_contract_report(self.runner.metrics, key, report)
            block.steps.append(step)
            block.actions.append(actions)
            block.outputs.append(outputs)
            block.times[t] = time.perf_counter()
            if step.died is not None:
                alive = alive & ~np.stack([step.died[a] for a in self.agents], axis=-1)
            reset = None
            if ended.any():
                reset = self.world.reset_worlds(np.flatnonzero(ended))
                reset = self.extensions.restarted(reset, np.flatnonzero(ended))
                alive = np.where(ended[:, None], True, alive)
                current = step.where(ended, reset)
            else:
                current = step
            block.resets.append(reset)
        self.current, self.alive = current, alive
        return block

    # ---- learner data ------------------------------------------------------------------
    def _block(self, block: SampledSteps) -> RolloutBlock:
        """The block as arrays for the learner; the episodes that ended in it are
        logged from each world's tally."""
        steps = StepArrays(block)
        arrays = rollout_block(steps, self.module_of)
        self.tally.add(arrays, self.started, block.times)
        ended = arrays.terminated | arrays.truncated
        log_sample_counts(self.tally, len(ended), int(ended.sum()), block.alive.sum(axis=(0, 1)))
        log_successes(self.tally, steps.success, ended)
        return arrays

    def _start_episode(self, world: int, began: float) -> None:
        self.episode_ids[world] = MultiAgentEpisode().id_
        self.env_t[world] = 0
        self.started[world] = began
        self.last_rewards[world] = {}

    def _episodes(self, block: SampledSteps) -> list[MultiAgentEpisode]:
        runner = self.runner
        horizon = len(block.steps)
        arrays = StepArrays(block)
        step_rewards = arrays.step_rewards()
        ended = arrays.terminated | arrays.truncated
        done_cache, ongoing_cache = metrics_episode_caches(runner)
        done_episodes, ongoing_episodes = [], []
        for world, start, stop, done in zip(*episode_pieces(ended), strict=True):
            continuing = start == 0  # the world's running episode goes on
            episode = build_chunk(
                arrays,
                step_rewards=step_rewards,
                world=world,
                start=start,
                stop=stop,
                done=done,
                episode_id=self.episode_ids[world] if continuing else MultiAgentEpisode().id_,
                env_t_started=int(self.env_t[world]) if continuing else 0,
                first_rewards=self.last_rewards[world] if continuing else {},
                module_of=self.module_of,
                mapping_fn=runner.config.policy_mapping_fn,
                seq_no=weights_seq_no(runner),
            )
            began = self.started[world] if continuing else block.times[start - 1]
            set_episode_times(episode, float(began), float(block.times[stop - 1]))
            if done:
                make_callback(
                    "on_episode_end",
                    callbacks_objects=env_runner_callbacks(runner),
                    # Sums an extension logs itself (EFX's budget) are not logged twice.
                    callbacks_functions=[
                        function
                        for function in callback_functions(runner.config, "on_episode_end")
                        if not is_logged_by_array_form(function)
                    ],
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
                    self._start_episode(world, block.times[stop - 1])
            else:
                ongoing_cache[episode.id_].append(episode)
                ongoing_episodes.append(episode)
                # The world's running episode continues in the next call.
                self.episode_ids[world] = episode.id_
                self.env_t[world] = episode.env_t
                self.started[world] = began
                self.last_rewards[world] = step_rewards[stop - 1][world]
        log_sample_counts(self.tally, horizon, int(ended.sum()), block.alive.sum(axis=(0, 1)))
        log_successes(self.tally, arrays.success, ended)
        done_cache.extend(done_episodes)
        return done_episodes + ongoing_episodes
