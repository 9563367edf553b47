"""A batched rollout block handed to the learner as arrays (``blocks.RolloutBlock``)
instead of RLlib episode chunks, and the runner's episode metrics kept per world
without episode objects.

A learner declares that it builds its train batch from such blocks
(``TAKES_ROLLOUT_BLOCKS`` on its class, not inherited: a subclass that changes what
its connectors compute must declare it again); ``rollout_block_refusal`` says why a
runner hands episode chunks instead."""

from __future__ import annotations

import numpy as np

from marllib_ext.rllib_compat import env_runner_callbacks
from marllib_ext.rllib_compat.env_runners import episode_metrics_window, log_episode_metrics
from marllib_ext.rollout.blocks import RolloutBlock, WorldArrays
from marllib_ext.rollout.chunks import Block
from marllib_ext.rollout.eligibility import runner_callbacks

# The env-contract check every algorithm runs at episode ends (by name: the algos
# package imports this one).
CONTRACT_CHECK = ("marllib_ext.algos.env_checks", "log_contract_breaches")
# The learner class attribute that says it takes ``RolloutBlock`` lists as episodes.
TAKES_ROLLOUT_BLOCKS = "TAKES_ROLLOUT_BLOCKS"


def takes_rollout_blocks(learner_class: type | None) -> bool:
    """Whether ``learner_class`` itself (not a base class) declares that it builds its
    batch from ``RolloutBlock`` lists."""
    return bool(learner_class is not None and vars(learner_class).get(TAKES_ROLLOUT_BLOCKS))


def _is_contract_check(function) -> bool:
    """The env-contract check every algorithm runs at episode ends; it never fires on
    arrays (no adapter reports there; rewards are checked by the learner)."""
    return (getattr(function, "__module__", None), getattr(function, "__name__", None)) == (
        CONTRACT_CHECK
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
    if not takes_rollout_blocks(config.learner_class):
        return f"the learner ({getattr(config.learner_class, '__name__', None)}) reads episodes"
    if (config.num_learners or 0) > 1:
        return "data-parallel learners shard episodes"
    sample_end = runner_callbacks(config, callback_objects, "on_sample_end")
    if sample_end:
        return f"an on_sample_end callback reads the episodes: {sample_end}"
    others = runner_callbacks(config, callback_objects, "on_episode_end", skip=_is_contract_check)
    if others:
        return f"on_episode_end callbacks read episodes: {others}"
    return None


def _stacked(arrays: list[WorldArrays], agents: list[str]):
    """``(observations, action_masks, states)`` of a list of per-step arrays, stacked
    over time (the state is every observation joined where the simulator has none)."""
    observations = {a: np.stack([s.observations[a] for s in arrays]) for a in agents}
    masks = None
    if arrays[0].action_masks is not None:
        masks = {a: np.stack([s.action_masks[a] for s in arrays]) for a in agents}
    if arrays[0].state is not None:
        states = np.stack([s.state for s in arrays])
    else:
        states = np.concatenate([observations[a] for a in agents], axis=-1)
    return observations, masks, states


def rollout_block(block: Block, module_of: dict[str, str]) -> RolloutBlock:
    """The learner's view of a block: what each step acted on, its outputs, rewards
    and ends, and the state after each step."""
    agents, steps = block.agents, block.steps
    observations, masks, states = _stacked(block.acted, agents)
    next_observations, next_masks, next_states = _stacked(steps, agents)
    outputs = {
        a: {k: np.stack([out[a][k] for out in block.outputs]) for k in block.outputs[0][a]}
        for a in agents
    }
    return RolloutBlock(
        agents=list(agents),
        module_of=dict(module_of),
        observations=observations,
        action_masks=masks,
        actions={a: np.stack([step[a] for step in block.actions]) for a in agents},
        outputs=outputs,
        states=states.astype(np.float32, copy=False),
        next_states=next_states.astype(np.float32, copy=False),
        next_observations=next_observations,
        next_action_masks=next_masks,
        rewards=np.stack([np.stack([s.rewards[a] for a in agents], -1) for s in steps]),
        terminated=np.stack([s.terminated for s in steps]),
        truncated=np.stack([s.truncated for s in steps]),
        alive=block.alive.copy(),
        died=(
            np.stack([np.stack([s.died[a] for a in agents], -1) for s in steps])
            if steps[0].died is not None
            else np.zeros_like(block.alive)
        ),
    )


class EpisodeTally:
    """Each world's running episode (length, per-agent return and steps) across
    ``sample()`` calls; an episode's metrics are logged where it ends, as RLlib's
    ``get_metrics`` logs a done episode's.

    RLlib keeps only the last ``episode_metrics_window`` episodes of each episode
    metric, so of the episodes that end in one call only that many (the latest) are
    logged: the metrics come out the same (every agent of an array world is present
    at the start of each episode, so the per-agent windows hold the same episodes),
    and a call in which hundreds of short battles end does not log each one."""

    def __init__(self, env_runner, agents: list[str], module_of: dict[str, str], num_envs: int):
        self.runner = env_runner
        self.agents = agents
        self.module_of = module_of
        self.window = episode_metrics_window(env_runner)
        self.length = np.zeros(num_envs, dtype=np.int64)
        self.returns = np.zeros((num_envs, len(agents)))
        self.agent_steps = np.zeros((num_envs, len(agents)), dtype=np.int64)

    def reset(self) -> None:
        self.length[:] = 0
        self.returns[:] = 0.0
        self.agent_steps[:] = 0

    def add(self, block: RolloutBlock, started: np.ndarray, times: np.ndarray) -> None:
        """Adds the block's steps; logs and restarts every episode that ended in it.
        ``started``: ``(B,)`` when each world's episode began (updated in place at the
        ends); ``times``: ``(T,)`` when each step was taken."""
        ended = block.terminated | block.truncated
        rewards = np.where(block.alive, block.rewards, 0.0)
        finished = []  # (length, duration, per-agent returns, per-agent steps), in order
        for t in range(len(ended)):
            self.length += 1
            self.returns += rewards[t]
            self.agent_steps += block.alive[t]
            for world in np.flatnonzero(ended[t]):
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
