"""The off-policy fast path of ``sac_roer`` / ``isac_roer`` (``fast_replay: true``).

One training step:

1. the env runners sample ``rollout_fragment_length`` steps per env; every episode
   chunk becomes 1-step transitions (``transitions_by_module``), stored per module in
   a ``replay.transitions.TransitionStore`` (numpy rows, a sum tree for priorities);
2. once ``num_steps_sampled_before_learning_starts`` env steps are in, the step earns
   ``updates_per_env_step`` gradient updates per sampled env step; ``K`` earned
   updates are drawn at once as ``K`` minibatches of ``train_batch_size`` rows
   (every draw from the priorities as they stand) and go to the learners in one
   ``update`` call of ``K`` gradient steps, with no connector pass over episodes;
3. the learners hand back each row's new priority with its store index; they are
   written once per call (``TransitionStore.update_priorities``). The SAC target nets
   take their soft update after every one of the ``K`` steps.

With ``N`` data-parallel learners (``per_type: uniform`` only) every minibatch is
split row-wise over the learners (``learner_order``), so that step ``k`` of every
learner is a share of minibatch ``k``: DDP then averages one minibatch's gradient.
"""

from __future__ import annotations

import numpy as np
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

from marllib_ext.algos.roer.learner import REPLAY_INDEX
from marllib_ext.algos.roer.settings import ROERSettings
from marllib_ext.errors import ConfigError
from marllib_ext.replay.transitions import TransitionStore, bytes_needed, refuse_past_memory
from marllib_ext.rllib_compat import sample_episodes

PROGRESS_KEY = "fast_replay"


def _chunk_transitions(chunk) -> dict[str, np.ndarray] | None:
    """A single-agent episode chunk's ``T`` transitions (``None`` when it holds none)."""
    steps = len(chunk)
    if steps == 0:
        return None
    observations = chunk.get_observations(slice(0, steps + 1))
    if isinstance(observations, dict):
        raise ConfigError(
            "fast_replay stores array observations; this env's are a dict (set fast_replay: false)"
        )
    observations = np.asarray(observations, np.float32).reshape(steps + 1, -1)
    terminateds = np.zeros(steps, np.float32)
    terminateds[-1] = float(chunk.is_terminated)
    return {
        Columns.OBS: observations[:-1],
        Columns.NEXT_OBS: observations[1:],
        Columns.ACTIONS: np.asarray(chunk.get_actions()),
        Columns.REWARDS: np.asarray(chunk.get_rewards(), np.float32),
        Columns.TERMINATEDS: terminateds,
    }


def transitions_by_module(episodes) -> dict[str, dict[str, np.ndarray]]:
    """``{module_id: columns}`` of every 1-step transition in ``episodes`` (single- or
    multi-agent chunks): ``obs``, ``new_obs``, ``actions``, ``rewards`` and
    ``terminateds`` (1 on an agent's last step when it terminated; a truncated step
    bootstraps from its next observation)."""
    parts: dict[str, list[dict[str, np.ndarray]]] = {}
    for episode in episodes:
        if hasattr(episode, "agent_episodes"):
            chunks = [
                (episode.module_for(agent_id), chunk)
                for agent_id, chunk in episode.agent_episodes.items()
            ]
        else:
            chunks = [(episode.module_id or DEFAULT_MODULE_ID, episode)]
        for module_id, chunk in chunks:
            columns = _chunk_transitions(chunk)
            if columns is not None:
                parts.setdefault(module_id, []).append(columns)
    return {
        module_id: {name: np.concatenate([c[name] for c in columns]) for name in columns[0]}
        for module_id, columns in parts.items()
    }


def learner_order(num_batches: int, batch_size: int, num_learners: int) -> np.ndarray:
    """Row order that makes RLlib's contiguous split over ``num_learners`` learners
    give learner ``i`` the ``i``-th share of every minibatch, in minibatch order: rows
    ``(K, N, B / N)`` transposed to ``(N, K, B / N)``."""
    share = batch_size // num_learners
    rows = np.arange(num_batches * batch_size).reshape(num_batches, num_learners, share)
    return rows.transpose(1, 0, 2).reshape(-1)


class FastReplay:
    """The stores and the replay ratio of one algorithm (see the module docstring)."""

    def __init__(self, settings: ROERSettings, num_learners: int, seed: int | None) -> None:
        self.settings = settings
        self.num_learners = max(1, num_learners)
        self.seed = seed
        self.stores: dict[str, TransitionStore] = {}
        self.update_credit = 0.0
        self.updates = 0

    def store_for(self, module_id: str, example: dict[str, np.ndarray]) -> TransitionStore:
        store = self.stores.get(module_id)
        if store is None:
            rule = self.settings.priority_rule
            if example:
                self._check_memory(example, rule.prioritized)
            store = TransitionStore(
                self.settings.buffer_capacity,
                prioritized=rule.prioritized,
                alpha=rule.sampling_alpha(self.settings),
                importance_beta=rule.importance_beta(self.settings),
                per_beta=rule.ema_step(self.settings),
                seed=None if self.seed is None else self.seed + len(self.stores),
            )
            self.stores[module_id] = store
        return store

    def _check_memory(self, example: dict[str, np.ndarray], prioritized: bool) -> None:
        """Refuses a new store that, full, would not fit next to the others."""
        needed = bytes_needed(self.settings.buffer_capacity, example, prioritized) + sum(
            s.bytes_at_capacity() for s in self.stores.values()
        )
        refuse_past_memory(
            needed, f"buffer_capacity={self.settings.buffer_capacity}", "the replay stores"
        )

    def add(self, episodes) -> None:
        """Stores ``episodes``' transitions, each module's in its store."""
        for module_id, columns in transitions_by_module(episodes).items():
            self.store_for(module_id, columns).add(columns)

    def earn(self, env_steps: int) -> int:
        """Updates earned by ``env_steps`` new env steps (the fraction carried over)."""
        self.update_credit += env_steps * self.settings.updates_per_env_step
        updates = int(self.update_credit)
        self.update_credit -= updates
        return updates

    def batch(self, num_batches: int) -> MultiAgentBatch:
        """``num_batches`` minibatches of every module, rows in ``learner_order``."""
        size = self.settings.train_batch_size
        order = learner_order(num_batches, size, self.num_learners)
        policy_batches = {}
        for module_id, store in sorted(self.stores.items()):
            sampled = store.sample(num_batches, size)
            columns = {
                **sampled.columns,
                "weights": sampled.weights,
                "n_step": np.ones(len(sampled.indices), np.int64),
                REPLAY_INDEX: sampled.indices,
            }
            policy_batches[module_id] = SampleBatch({k: v[order] for k, v in columns.items()})
        return MultiAgentBatch(policy_batches, env_steps=num_batches * size)

    def write_back(self, feedback: list[dict[str, tuple[np.ndarray, np.ndarray]]]) -> None:
        """Every learner's ``{module_id: (indices, priorities)}`` into the stores."""
        for learner_feedback in feedback:
            for module_id, (indices, priorities) in learner_feedback.items():
                self.stores[module_id].update_priorities(indices, priorities)

    def progress(self) -> dict[str, float]:
        return {
            "replay_transitions": sum(len(s) for s in self.stores.values()),
            "replay_bytes": sum(s.nbytes for s in self.stores.values()),
            "updates": self.updates,
        }

    def sampling_spread(self) -> dict[str, float]:
        """How far the draws are from uniform (``TransitionStore.sampling_spread``,
        averaged over the stores), as ``sampling_<measure>``; empty before any store."""
        spreads = [s.sampling_spread() for s in self.stores.values()]
        return {
            f"sampling_{name}": float(np.mean([spread[name] for spread in spreads]))
            for name in (spreads[0] if spreads else {})
        }

    def get_state(self) -> dict:
        return {
            "stores": {m: s.get_state() for m, s in self.stores.items()},
            "update_credit": self.update_credit,
            "updates": self.updates,
        }

    def set_state(self, state: dict) -> None:
        self.stores = {}
        for module_id, store_state in state["stores"].items():
            store = self.store_for(module_id, {})
            store.set_state(store_state)
        self.update_credit = float(state["update_credit"])
        self.updates = int(state["updates"])


def fast_training_step(algorithm, replay: FastReplay) -> None:
    """One sample-store-update step of ``ROERSAC`` with ``fast_replay`` (see above)."""
    episodes, runner_results = sample_episodes(
        algorithm.env_runner_group, algorithm.config.sample_timeout_s
    )
    algorithm.metrics.aggregate(runner_results, key=ENV_RUNNER_RESULTS)
    replay.add(episodes)
    sampled_lifetime = algorithm.metrics.peek(
        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
    )
    new_env_steps = sum(len(episode) for episode in episodes)
    if sampled_lifetime < replay.settings.num_steps_sampled_before_learning_starts:
        return
    updates = replay.earn(new_env_steps)
    if updates == 0 or not replay.stores:
        return
    learner_results = algorithm.learner_group.update(
        batch=replay.batch(updates),
        minibatch_size=replay.settings.train_batch_size // replay.num_learners,
        num_epochs=1,
        shuffle_batch_per_epoch=False,
        timesteps={
            NUM_ENV_STEPS_SAMPLED_LIFETIME: sampled_lifetime,
            NUM_AGENT_STEPS_SAMPLED_LIFETIME: algorithm.metrics.peek(
                (ENV_RUNNER_RESULTS, NUM_AGENT_STEPS_SAMPLED_LIFETIME), default={}
            ),
        },
    )
    replay.updates += updates
    if replay.settings.priority_rule.prioritized:
        feedback = algorithm.learner_group.foreach_learner(
            lambda learner: learner.take_replay_feedback()
        )
        replay.write_back([result.get() for result in feedback])
    algorithm.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
    algorithm.env_runner_group.sync_weights(
        from_worker_or_learner_group=algorithm.learner_group,
        policies=sorted(replay.stores),
        inference_only=True,
    )
    algorithm.metrics.log_dict(replay.progress(), key=PROGRESS_KEY, window=1)
