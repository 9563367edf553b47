"""RLlib internals of env runners: what the batched rollout path
(``rollout.ArrayRollout``) uses to sample in ``MultiAgentEnvRunner``'s place (its seed,
its reset flag, the episode caches ``get_metrics`` reads, episode timestamps), the
episodes the package's runners start, env creators and synchronous sampling (ray 2.60)."""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Iterator
from typing import Any

from ray.rllib.callbacks.callbacks import RLlibCallback

from marllib_ext.rllib_compat.episodes import SortedAgentsEpisode, as_sorted_agents_episode


def runner_seed(env_runner) -> int | None:
    """The seed the runner's envs get at their first reset.

    Relies on: ``EnvRunner.__init__`` stores ``config.seed`` (offset by the worker
    index) in ``_seed``."""
    return env_runner._seed


def needs_initial_reset(env_runner) -> bool:
    """Whether the runner's next ``sample()`` starts by resetting (and seeding) its envs.

    Relies on: ``MultiAgentEnvRunner`` keeps the flag in ``_needs_initial_reset``."""
    return bool(env_runner._needs_initial_reset)


def set_needs_initial_reset(env_runner, value: bool) -> None:
    """Sets the flag :func:`needs_initial_reset` reads."""
    env_runner._needs_initial_reset = value


def weights_seq_no(env_runner) -> int:
    """The version of the weights the runner samples with (stored with every action).

    Relies on: ``MultiAgentEnvRunner`` keeps it in ``_weights_seq_no``."""
    return env_runner._weights_seq_no


def metrics_episode_caches(env_runner) -> tuple[list, dict[str, list]]:
    """``(done episodes, {episode id: its earlier chunks})``: what ``get_metrics`` turns
    into episode metrics (length, return, per-agent and per-module returns).

    Relies on: ``MultiAgentEnvRunner.get_metrics`` reads ``_done_episodes_for_metrics``
    and adds the chunks in ``_ongoing_episodes_for_metrics`` (a ``defaultdict(list)``)
    of the same id."""
    return env_runner._done_episodes_for_metrics, env_runner._ongoing_episodes_for_metrics


def mark_sampling_done(env_runner) -> None:
    """Lets the runner log the time until its next ``sample()`` call.

    Relies on: ``MultiAgentEnvRunner.sample`` logs ``TIME_BETWEEN_SAMPLING`` from
    ``_time_after_sampling``."""
    env_runner._time_after_sampling = time.perf_counter()


def time_after_sampling(env_runner) -> float | None:
    """When the runner's previous ``sample()`` returned (``None`` before the first)."""
    return env_runner._time_after_sampling


def set_episode_times(episode: Any, start: float, last_step: float) -> None:
    """Dates an episode chunk built in one go: it started at ``start`` and took its last
    step at ``last_step`` (``perf_counter`` times), for ``get_duration_s``.

    Relies on: ``MultiAgentEpisode`` keeps the times in ``_start_time`` and
    ``_last_step_time``."""
    episode._start_time = start
    episode._last_step_time = last_step


def custom_connectors(config) -> tuple[Any, Any]:
    """``(env_to_module, module_to_env)``: the connector builders the algorithm added to
    RLlib's default pipelines (``None`` where it added none).

    Relies on: ``AlgorithmConfig.env_runners(env_to_module_connector=...,
    module_to_env_connector=...)`` stores them in ``_env_to_module_connector`` and
    ``_module_to_env_connector``."""
    return config._env_to_module_connector, config._module_to_env_connector


def episode_from_agent_chunks(
    *,
    id_: str,
    agent_episodes: dict[str, Any],
    env_t_started: int,
    length: int,
    terminated: bool,
    truncated: bool,
    agent_module_ids: dict[str, str],
    agent_to_module_mapping_fn: Any,
) -> Any:
    """A ``MultiAgentEpisode`` chunk of ``length`` env steps made of ``SingleAgentEpisode``
    chunks (no lookback), without RLlib's per-step assembly. Each agent observed at every
    env step of the chunk up to its own end: the chunk's, or the step it terminated at.

    Relies on: ``MultiAgentEpisode`` keeps its agents' chunks in ``agent_episodes``, the
    env step -> agent step map in ``env_t_to_agent_t`` (one ``InfiniteLookbackBuffer``
    per agent, agent steps counted from ``agent_t_started``), and ``env_t``; what its
    constructor builds from per-step dicts, checked by ``validate()``."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
    from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer

    episode = SortedAgentsEpisode(
        id_=id_,
        env_t_started=env_t_started,
        agent_t_started={agent: env_t_started for agent in agent_episodes},
        len_lookback_buffer=0,
        agent_module_ids=dict(agent_module_ids),
        agent_to_module_mapping_fn=agent_to_module_mapping_fn,
        terminateds=terminated,
        truncateds=truncated,
    )
    episode.env_t = env_t_started + length
    for agent, agent_episode in agent_episodes.items():
        episode.agent_episodes[agent] = agent_episode
        # A list, as RLlib keeps it (also in a numpy episode): lookups return ints; env
        # steps after an agent's end are RLlib's skip tag, as ``add_env_step`` leaves them.
        steps = list(range(env_t_started, env_t_started + len(agent_episode) + 1))
        steps += [MultiAgentEpisode.SKIP_ENV_TS_TAG] * (length - len(agent_episode))
        episode.env_t_to_agent_t[agent] = InfiniteLookbackBuffer(data=steps, lookback=0)
    episode.validate()
    return episode


@contextlib.contextmanager
def pause_cyclic_gc() -> Iterator[None]:
    """Runs the block with Python's cyclic garbage collector off.

    RLlib's episode and connector objects are many small containers; building or
    batching thousands of them (a batched rollout's chunks, their learner batch) makes
    the collector run over and over. Nothing they hold forms a cycle, so it finds
    nothing; it runs once afterwards instead."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def episode_metrics_window(env_runner) -> int:
    """How many of the latest episodes each of the runner's episode metrics keeps.

    Relies on: ``MultiAgentEnvRunner._log_episode_metrics`` logs every episode metric
    with ``window = max(1, ceil(metrics_num_episodes_for_smoothing / (num_env_runners
    or 1)))``."""
    config = env_runner.config
    return max(
        1, math.ceil(config.metrics_num_episodes_for_smoothing / (config.num_env_runners or 1))
    )


def log_episode_metrics(
    env_runner,
    *,
    length: int,
    episode_return: float,
    duration_s: float,
    agent_returns: dict[str, float],
    module_returns: dict[str, float],
    agent_steps: dict[str, int],
) -> None:
    """Logs one ended episode's metrics as ``get_metrics`` logs a done episode's (for a
    runner that hands its learner arrays instead of episodes).

    Relies on: ``MultiAgentEnvRunner._log_episode_metrics(length, ret, sec, agents,
    modules, agent_steps)`` logs them with the runner's smoothing window."""
    env_runner._log_episode_metrics(
        length, episode_return, duration_s, agent_returns, module_returns, agent_steps
    )


def registered_env_creator(name: Any):
    """The creator ``ray.tune.register_env`` registered under ``name`` (``None`` if none).

    Relies on: Tune keeps env creators in ``ray.tune.registry._global_registry`` under
    ``ENV_CREATOR``."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    if isinstance(name, str) and _global_registry.contains(ENV_CREATOR, name):
        return _global_registry.get(ENV_CREATOR, name)
    return None


def reset_before_next_sample(env_runner) -> None:
    """Makes a (MultiAgent)``EnvRunner`` reset its env at its next ``sample()``.

    Relies on: the env runner resets before sampling while ``_needs_initial_reset``."""
    env_runner._needs_initial_reset = True


def env_runner_callbacks(env_runner) -> list:
    """The callback objects an env runner calls (for ``make_callback``).

    Relies on: (MultiAgent)``EnvRunner`` keeps them in ``_callbacks``."""
    return env_runner._callbacks


# The env runners' mean info["success"] of ended episodes (batched rollouts log it).
EPISODE_SUCCESS = "episode_success_mean"


def skip_end_of_iteration_runner_sync(config) -> None:
    """Stops ``Algorithm.step`` from syncing the env runners' states after each
    iteration; the algorithm's ``training_step`` carries what the runners need itself.

    Relies on: ``Algorithm.step`` calls ``EnvRunnerGroup.sync_env_runner_states`` (a
    blocking ``get_state`` on every remote runner, then a broadcast of the merged
    connector states and the lifetime env-step count) unless
    ``config._dont_auto_sync_env_runner_states`` is set, as IMPALA's config sets it."""
    config._dont_auto_sync_env_runner_states = True


def sample_episodes(env_runner_group, sample_timeout_s: float | None, random_actions: bool = False):
    """``(episodes, env_runner_metrics)`` of one synchronous sample over the group;
    ``random_actions``: every runner acts uniformly at random.

    Relies on: ``synchronous_parallel_sample`` returns new-stack episodes and the
    runners' metrics with ``_uses_new_env_runners=True, _return_metrics=True``."""
    from ray.rllib.execution.rollout_ops import synchronous_parallel_sample

    return synchronous_parallel_sample(
        worker_set=env_runner_group,
        concat=True,
        sample_timeout_s=sample_timeout_s,
        random_actions=random_actions,
        _uses_new_env_runners=True,
        _return_metrics=True,
    )


class StartsSortedAgentsEpisodes:
    """``MultiAgentEnvRunner`` mixin (list it before the RLlib runner): every episode the
    runner starts is an ``episodes.SortedAgentsEpisode``, so its env-to-module
    connectors, and later the learner's, see its agents in sorted order; its
    continuations (``cut()``) are too.

    Relies on: ``MultiAgentEnvRunner`` starts each episode in
    ``_new_episode(env_index, episodes=None)``, which stores it in
    ``episodes[env_index]`` (``_ongoing_episodes`` by default) and calls the
    ``on_episode_created`` callbacks; ongoing episodes continue through ``cut()``."""

    def _new_episode(self, env_index, episodes=None):
        super()._new_episode(env_index, episodes)
        started = self._ongoing_episodes if episodes is None else episodes
        as_sorted_agents_episode(started[env_index])


class CountedAsEpisodes:
    """Mixin for what a package env runner's ``sample()`` returns in place of episodes
    (``rollout.blocks.RolloutBlock``): RLlib counts and carries it as it does episodes.
    A subclass gives ``env_steps()`` and ``agent_steps()``.

    Relies on: ``synchronous_parallel_sample`` (RLlib's PPO ``training_step``) counts
    each item a runner returns with ``env_steps()`` / ``agent_steps()`` toward the
    sample target and hands the list, untouched, to ``LearnerGroup.update(episodes=)``;
    with one learner (in the driver or remote) ``TrainingData`` passes the list to
    ``Learner.update`` as it is. ``len()`` is what ``ShardEpisodesIterator`` (several
    learners) and the async-update drop count read: the iterator hands an item out
    whole while it fits its shard's share of the total length, so a runner hands one
    equal block per learner and no block is ever sliced."""

    def env_steps(self) -> int:
        raise NotImplementedError

    def agent_steps(self) -> int:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.env_steps()


def callback_functions(config, name: str) -> list:
    """The functions a config calls at callback ``name`` (e.g. ``"on_episode_end"``).

    Relies on: ``AlgorithmConfig.callbacks(on_...=...)`` stores them in
    ``callbacks_on_...``, as one function, a list, or ``None``."""
    functions = getattr(config, f"callbacks_{name}", None) or []
    return list(functions) if isinstance(functions, list) else [functions]


def runner_callbacks(
    config, callback_objects: list, name: str, skip=lambda function: False
) -> list[str]:
    """What a runner with ``config`` and ``callback_objects`` calls at callback ``name``
    (e.g. ``"on_sample_end"``): the config's functions by name (but those ``skip``
    accepts), and ``Class.name`` for each callback object whose class overrides it.

    Relies on: ``AlgorithmConfig.callbacks(on_...=...)`` stores the functions in
    ``callbacks_on_...`` (one or a list); an ``RLlibCallback`` subclass that does not
    override a method inherits its no-op."""
    labels = [
        getattr(f, "__name__", repr(f)) for f in callback_functions(config, name) if not skip(f)
    ]
    for callback in callback_objects:
        if getattr(type(callback), name) is not getattr(RLlibCallback, name):
            labels.append(f"{type(callback).__name__}.{name}")
    return labels
