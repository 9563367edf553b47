"""A batched rollout block handed to the learner as arrays (``blocks.RolloutBlock``)
instead of RLlib episode chunks, and the runner's episode metrics kept per world
without episode objects.

A learner takes blocks when its class's ``rollout_block_refusal()`` is ``None``: every
on-policy learner (GAE on each module's own value head, the joint critics' one team
batch builder ``postprocessing.block_batch.joint_critic_block_batch``, which episode
chunks reach through ``rollout.episode_blocks``, and COMA's). ``rollout_block_refusal``
here says why a runner hands episode chunks instead."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ray.rllib.utils.metrics import (
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
)

from marllib_ext.ops.rollout import team_step_costs
from marllib_ext.rllib_compat import env_runner_callbacks
from marllib_ext.rllib_compat.env_runners import (
    EPISODE_SUCCESS,
    callback_functions,
    episode_metrics_window,
    log_episode_metrics,
    runner_callbacks,
)
from marllib_ext.rollout.blocks import RolloutBlock
from marllib_ext.rollout.chunks import StepArrays, stacked_arrays
from marllib_ext.rollout.extensions import episode_end_array_form, is_logged_by_array_form


def needs_no_episode_objects(function):
    """Marks an ``on_episode_end`` callback that has nothing to report on arrays (e.g.
    the env-contract check: no adapter reports there, the learner checks the rewards),
    so that it does not keep a runner from handing rollout blocks."""
    function.needs_no_episode_objects = True
    return function


def _needs_no_episode_objects(function) -> bool:
    return (
        getattr(function, "needs_no_episode_objects", False)
        or is_logged_by_array_form(function)
        or episode_end_array_form(function) is not None
    )


def rollout_block_refusal(env_runner) -> str | None:
    """Why a batched env runner hands its learner episode chunks rather than
    ``RolloutBlock`` arrays (``None``: it hands blocks)."""
    return block_refusal(env_runner.config, env_runner_callbacks(env_runner))


def block_refusal(config, callback_objects: list) -> str | None:
    """:func:`rollout_block_refusal` of a runner with ``config`` and the callback
    objects it calls."""
    if config.in_evaluation:
        return "an evaluation runner"
    learner_class = config.learner_class
    name = getattr(learner_class, "__name__", None)
    learner_refusal = getattr(learner_class, "rollout_block_refusal", None)
    if learner_refusal is None:
        return f"the learner ({name}) reads episodes"
    reason = learner_refusal()
    if reason is not None:
        return f"the learner ({name}) reads episodes: {reason}"
    learners = config.num_learners or 0
    if learners > 1 and config.num_envs_per_env_runner % learners:
        return (
            f"{config.num_envs_per_env_runner} worlds per runner do not split evenly over "
            f"{learners} data-parallel learners"
        )
    sample_end = runner_callbacks(config, callback_objects, "on_sample_end")
    if sample_end:
        return f"an on_sample_end callback reads the episodes: {sample_end}"
    others = runner_callbacks(
        config, callback_objects, "on_episode_end", skip=_needs_no_episode_objects
    )
    if others:
        return f"on_episode_end callbacks read episodes: {others}"
    return None


def rollout_block(arrays: StepArrays, module_of: dict[str, str]) -> RolloutBlock:
    """The learner's view of a block: what each step acted on, its outputs, rewards
    and ends, and the state after each step."""
    block = arrays.block
    observations, masks, states = stacked_arrays(block.acted, block.agents)
    return RolloutBlock(
        agents=list(block.agents),
        module_of=dict(module_of),
        observations=observations,
        action_masks=masks,
        actions=arrays.actions,
        outputs=arrays.outputs,
        states=states.astype(np.float32, copy=False),
        next_states=arrays.state.astype(np.float32, copy=False),
        next_observations=arrays.obs,
        next_action_masks=arrays.masks,
        rewards=arrays.rewards,
        terminated=arrays.terminated,
        truncated=arrays.truncated,
        alive=block.alive.copy(),
        died=arrays.died,
        starts=None if block.starts is None else block.starts.copy(),
        costs=_per_agent(arrays.costs, block.agents),
        team_costs=_per_agent(arrays.team_costs, block.agents),
    )


def _per_agent(columns: dict[str, np.ndarray] | None, agents: list[str]):
    """``{agent: (T, B)}`` as ``(T, B, n_agents)`` (``None`` stays ``None``)."""
    return None if columns is None else np.stack([columns[a] for a in agents], axis=-1)


@dataclass
class EndedEpisodes:
    """The episodes that ended in one block, for an ``on_episode_end`` callback's
    array form (``extensions.with_episode_end_array_form``): per episode and agent
    (``agents`` order), the return, the steps it was present, and its team's episode
    cost (``ops.rollout.team_step_costs`` summed over the episode; ``None`` where the
    env reports no cost)."""

    agents: list[str]
    returns: np.ndarray
    agent_steps: np.ndarray
    team_costs: np.ndarray | None


class EpisodeTally:
    """Each world's running episode (length, per-agent return and steps) across
    ``sample()`` calls; an episode's metrics are logged where it ends, as RLlib's
    ``get_metrics`` logs a done episode's.

    RLlib keeps only the last ``episode_metrics_window`` episodes of each episode
    metric, so of the episodes that end in one call only that many (the latest) are
    logged: the metrics come out the same (every agent of an array world is present
    at the start of each episode, so the per-agent windows hold the same episodes),
    and a call in which hundreds of short battles end does not log each one."""

    def __init__(
        self,
        env_runner,
        agents: list[str],
        module_of: dict[str, str],
        num_envs: int,
        team_of: dict[str, str] | None = None,
    ):
        self.runner = env_runner
        self.agents = agents
        self.module_of = module_of
        # The agents of each team whose summed cost the env reports (``team_of``).
        team_of = team_of or {}
        names = sorted({team_of.get(agent, "") for agent in agents})
        self.cost_teams = [
            np.array([i for i, a in enumerate(agents) if team_of.get(a, "") == name])
            for name in names
        ]
        self.window = episode_metrics_window(env_runner)
        self.length = np.zeros(num_envs, dtype=np.int64)
        self.returns = np.zeros((num_envs, len(agents)))
        self.agent_steps = np.zeros((num_envs, len(agents)), dtype=np.int64)
        # Per agent, its team's cost summed over the steps it was present.
        self.team_costs = np.zeros((num_envs, len(agents)))
        functions = callback_functions(getattr(env_runner, "config", None), "on_episode_end")
        self.array_forms = [f for f in map(episode_end_array_form, functions) if f is not None]

    def reset(self) -> None:
        self.length[:] = 0
        self.returns[:] = 0.0
        self.agent_steps[:] = 0
        self.team_costs[:] = 0.0

    def add(self, block: RolloutBlock, started: np.ndarray, times: np.ndarray) -> None:
        """Adds the block's steps; logs and restarts every episode that ended in it.
        ``started``: ``(B,)`` when each world's episode began (updated in place at the
        ends); ``times``: ``(T,)`` when each step was taken."""
        ended = block.terminated | block.truncated
        rewards = np.where(block.alive, block.rewards, 0.0)
        team_costs = getattr(block, "team_costs", None)
        if team_costs is not None:  # each agent's column: its team's cost of the step
            observed = block.observed_after()
            step_costs = np.zeros(team_costs.shape)
            for members in self.cost_teams:
                team_cost = team_step_costs(team_costs, observed, members)
                step_costs[:, :, members] = team_cost[:, :, None]
            team_costs = step_costs
        finished = []  # (length, duration, per-agent returns, per-agent steps), in order
        ended_team_costs = []  # (n_agents,) of each finished episode, in order
        for t in range(len(ended)):
            self.length += 1
            self.returns += rewards[t]
            self.agent_steps += block.alive[t]
            if team_costs is not None:
                self.team_costs += team_costs[t]
            for world in np.flatnonzero(ended[t]):
                ended_team_costs.append(self.team_costs[world].copy())
                self.team_costs[world] = 0.0
                finished.append(
                    (
                        int(self.length[world]),
                        float(times[t] - started[world]),
                        self.returns[world].tolist(),
                        self.agent_steps[world].tolist(),
                    )
                )
                started[world] = times[t]
                self.length[world] = 0
                self.returns[world] = 0.0
                self.agent_steps[world] = 0
        for episode in finished[-self.window :]:
            self._log(*episode)
        if finished and self.array_forms:
            ended_episodes = EndedEpisodes(
                agents=self.agents,
                returns=np.array([episode[2] for episode in finished]),
                agent_steps=np.array([episode[3] for episode in finished]),
                team_costs=np.array(ended_team_costs) if team_costs is not None else None,
            )
            for array_form in self.array_forms:
                array_form(
                    episodes=ended_episodes,
                    env_runner=self.runner,
                    metrics_logger=self.runner.metrics,
                )

    def _log(self, length: int, duration_s: float, returns: list, steps: list) -> None:
        present = [i for i, n in enumerate(steps) if n > 0]
        module_returns: dict[str, float] = {}
        for i in present:
            module = self.module_of[self.agents[i]]
            module_returns[module] = module_returns.get(module, 0.0) + returns[i]
        log_episode_metrics(
            self.runner,
            length=length,
            episode_return=float(sum(returns[i] for i in present)),
            duration_s=duration_s,
            agent_returns={self.agents[i]: returns[i] for i in present},
            module_returns=module_returns,
            agent_steps={self.agents[i]: steps[i] for i in present},
        )


def log_sample_counts(
    tally: EpisodeTally, horizon: int, num_episodes: int, agent_steps: np.ndarray
) -> None:
    """The env runner's step and episode counters for ``horizon`` steps of all worlds
    (``agent_steps``: each agent's steps present)."""
    metrics = tally.runner.metrics
    env_steps = horizon * len(tally.length)
    metrics.log_value(NUM_ENV_STEPS_SAMPLED, env_steps, reduce="sum")
    metrics.log_value(
        NUM_ENV_STEPS_SAMPLED_LIFETIME, env_steps, reduce="lifetime_sum", with_throughput=True
    )
    if num_episodes:
        metrics.log_value(NUM_EPISODES, num_episodes, reduce="sum")
        metrics.log_value(NUM_EPISODES_LIFETIME, num_episodes, reduce="lifetime_sum")
    for agent, steps in zip(tally.agents, agent_steps.tolist(), strict=True):
        module_id = tally.module_of[agent]
        metrics.log_value((NUM_AGENT_STEPS_SAMPLED, agent), steps, reduce="sum")
        metrics.log_value((NUM_AGENT_STEPS_SAMPLED_LIFETIME, agent), steps, reduce="lifetime_sum")
        metrics.log_value((NUM_MODULE_STEPS_SAMPLED, module_id), steps, reduce="sum")
        metrics.log_value(
            (NUM_MODULE_STEPS_SAMPLED_LIFETIME, module_id), steps, reduce="lifetime_sum"
        )


def log_successes(tally: EpisodeTally, success: np.ndarray | None, ended: np.ndarray) -> None:
    """``info["success"]`` of the episodes that ended (a SMAX win) as the runner's
    ``EPISODE_SUCCESS``: a mean over the episode metrics window."""
    if success is None:
        return
    reported = success[ended & np.isfinite(success)]
    for value in reported[-tally.window :].tolist():
        tally.runner.metrics.log_value(EPISODE_SUCCESS, value, reduce="mean", window=tally.window)
