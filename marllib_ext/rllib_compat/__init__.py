"""The one home for RLlib internals this package relies on (ray 2.60).

Everything here touches a private attribute or method of RLlib, or a convention RLlib
does not document as API. Each function says which RLlib behaviour it relies on;
``tests/test_rllib_compat.py`` fails if RLlib changes one of them. Nothing else in
``marllib_ext`` reads ``learner_config_dict`` or a private RLlib name (more in
``off_policy.py``, ``episodes.py`` and ``env_runners.py``)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.policy.sample_batch import MultiAgentBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import TD_ERROR_KEY

from marllib_ext.errors import ConfigError
from marllib_ext.ops.minibatches import minibatch_steps
from marllib_ext.rllib_compat.env_runners import pause_cyclic_gc
from marllib_ext.rllib_compat.off_policy import (  # re-exported
    ActorBackwardApart,  # noqa: F401
    TargetUpdateEveryGradientStep,  # noqa: F401
    last_td_error,  # noqa: F401
)

# learner_config_dict entry that carries the typed settings object.
SETTINGS_KEY = "marllib_ext_settings"


# ---- settings: one typed object, copied with the config to every actor -----------------
def with_settings(config: AlgorithmConfig, settings: Any) -> AlgorithmConfig:
    """``config`` carrying ``settings`` (a frozen dataclass).

    Relies on: ``AlgorithmConfig.learner_config_dict`` is copied, with the rest of the
    config, to every learner, env runner and callback, and is pickled into checkpoints
    (a frozen dataclass pickles as plain data: its class and field values)."""
    return with_learner_value(config, SETTINGS_KEY, settings)


def with_learner_value(config: AlgorithmConfig, key: str, value: Any) -> AlgorithmConfig:
    """``config`` carrying ``value`` under ``key`` next to the settings (plain data that
    every learner and the algorithm read with :func:`learner_value`).

    Relies on what :func:`with_settings` relies on: ``learner_config_dict`` travels
    with the config and is pickled into checkpoints."""
    return config.learners(learner_config_dict={key: value})


def learner_value(config: AlgorithmConfig, key: str) -> Any:
    """The value :func:`with_learner_value` attached to ``config`` under ``key``."""
    values = config.learner_config_dict or {}
    if key not in values:
        raise ConfigError(f"this RLlib config carries no {key!r} (not built by marllib_ext)")
    return values[key]


def settings_of(config: AlgorithmConfig) -> Any:
    """The typed settings :func:`with_settings` attached to ``config``."""
    settings = (config.learner_config_dict or {}).get(SETTINGS_KEY)
    if settings is None:
        raise ConfigError("this RLlib config was not built by marllib_ext (no settings)")
    return settings


# ---- connector pipelines ---------------------------------------------------------------
def learner_connector(learner) -> ConnectorPipelineV2:
    """The learner's connector pipeline.

    Relies on: ``Learner.build()`` stores it in ``Learner._learner_connector`` (no
    public accessor in ray 2.60)."""
    return learner._learner_connector


def env_to_module(env_runner) -> ConnectorPipelineV2 | None:
    """An env runner's env-to-module pipeline (``None`` before it is built).

    Relies on: (MultiAgent)``EnvRunner`` stores it in ``_env_to_module``."""
    return getattr(env_runner, "_env_to_module", None)


def connectors_of(pipeline: ConnectorPipelineV2 | None, connector_class: type) -> list:
    """The connectors of ``connector_class`` in ``pipeline``.

    Relies on: ``ConnectorPipelineV2.__getitem__`` with a class returns every piece that
    is an instance of it (searching nested pipelines)."""
    return [] if pipeline is None else list(pipeline[connector_class])


def replace_connector(
    pipeline: ConnectorPipelineV2, old_class: type, new: ConnectorV2
) -> ConnectorPipelineV2:
    """``pipeline`` with every ``old_class`` piece removed and ``new`` appended last."""
    pipeline.remove(old_class)
    pipeline.append(new)
    return pipeline


# ---- modules ---------------------------------------------------------------------------
def plain_module(modules, module_id: str | None = None):
    """The plain RLModule ``modules[module_id]`` (or ``modules`` itself), its own methods
    (``compute_values``, a mixer) callable whatever the number of learners.

    Relies on: with ``num_learners > 1`` RLlib's ``TorchLearner`` wraps every module in
    ``TorchDDPRLModule``, which forwards only ``forward_*`` and returns the wrapped
    module from ``unwrapped()``; a plain ``RLModule.unwrapped()`` returns itself.
    With DDP's static graph a module's gradients are all-reduced only when its loss
    uses tensors its wrapped ``forward_train`` returned: a critic whose
    ``forward_train`` returns nothing never syncs (measured), so losses read
    ``fwd_out``; extra terms on the plain module (IA2C's value head on the forward's
    embeddings) sync with them."""
    module = modules if module_id is None else modules[module_id]
    return module.unwrapped()


# ---- env runners and sampling ---------------------------------------------------------
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


def sample_episodes(env_runner_group, sample_timeout_s: float | None):
    """``(episodes, env_runner_metrics)`` of one synchronous sample over the group.

    Relies on: ``synchronous_parallel_sample`` returns new-stack episodes and the
    runners' metrics with ``_uses_new_env_runners=True, _return_metrics=True``."""
    from ray.rllib.execution.rollout_ops import synchronous_parallel_sample

    return synchronous_parallel_sample(
        worker_set=env_runner_group,
        concat=True,
        sample_timeout_s=sample_timeout_s,
        _uses_new_env_runners=True,
        _return_metrics=True,
    )


# ---- data-parallel learners -----------------------------------------------------------
def _process_group_device():
    """``None`` without a process group (0 or 1 learner), else the device its collectives
    take tensors on.

    Relies on: with ``num_learners > 1`` RLlib's ``LearnerGroup`` starts the learner
    actors through Ray Train's ``TorchConfig``, which initializes ``torch.distributed``
    (gloo on CPU, nccl on GPU) in every learner before ``Learner.build()``."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def data_parallel() -> bool:
    """Whether this learner is one of several data-parallel (DDP) learners."""
    return _process_group_device() is not None


def max_over_learners(count: int) -> int:
    """The largest ``count`` over all data-parallel learners (``count`` itself with one):
    every learner must take the same number of DDP steps or the all-reduce hangs."""
    device = _process_group_device()
    if device is None:
        return int(count)
    value = torch.tensor([int(count)], dtype=torch.int64, device=device)
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return int(value.item())


def sum_over_learners(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over all data-parallel learners (``tensor`` itself with one);
    every learner gets the same sum, on ``tensor``'s device."""
    device = _process_group_device()
    if device is None:
        return tensor
    value = tensor.detach().to(device).clone()
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.SUM)
    return value.to(tensor.device)


def first_learners_array(array: np.ndarray) -> np.ndarray:
    """The first learner's ``array`` (an int64 or float64 array of the same shape on
    every learner), for choices that must agree across learners (HAPPO's order)."""
    device = _process_group_device()
    if device is None:
        return array
    tensor = torch.as_tensor(np.ascontiguousarray(array), device=device)
    torch.distributed.broadcast(tensor, src=0)
    return tensor.cpu().numpy()


# ---- learner internals -----------------------------------------------------------------
def record_extra_loss(learner, module_id: str, name: str, loss) -> None:
    """Registers a loss term computed inside ``compute_loss_for_module`` so that the
    learner's gradient bookkeeping sees it.

    Relies on: ``TorchLearner`` keeps per-update losses in ``_temp_losses`` keyed by
    ``(module_id, name)``; SAC's learner reads its own terms from there."""
    learner._temp_losses[(module_id, name)] = loss


def should_save_component(component, key: str, components, not_components) -> bool:
    """Whether ``key`` belongs in ``get_state(components, not_components)`` (relies on:
    ``Checkpointable._check_component``)."""
    return component._check_component(key, components, not_components)


def hand_priorities_to_replay(metrics, module_id: str, priorities) -> None:
    """Makes ``priorities`` the per-sample values that RLlib's (SAC/DQN)
    ``training_step`` passes to the replay buffer's ``update_priorities``.

    Relies on: the training step reads ``learner_results[module_id][TD_ERROR_KEY]``, an
    ``item_series`` the learner logs, as the new priorities."""
    metrics.delete(module_id, TD_ERROR_KEY, key_error=False)
    metrics.log_value(key=(module_id, TD_ERROR_KEY), value=priorities, reduce="item_series")


def local_learner(algorithm: Algorithm) -> Learner:
    """The learner that runs in the driver (``num_learners`` 0); for tests and
    diagnostics that read a learner's modules or call its losses.

    Relies on: ``LearnerGroup`` keeps its local learner in ``_learner`` (``None`` when
    the learners are remote)."""
    learner = algorithm.learner_group._learner
    if learner is None:
        raise ValueError("the learners are remote (num_learners >= 1); no local learner")
    return learner


def priorities_from_learner(learner_results, module_id: str) -> np.ndarray:
    """The priorities a learner handed over with ``hand_priorities_to_replay`` in its
    last update, taken out of one learner's results (so they are not aggregated as a
    metric).

    Relies on: ``LearnerGroup.update`` returns each learner's ``MetricsLogger`` stats
    (not reduced), and an ``item_series`` stat's ``peek()`` lists its items."""
    logged = learner_results[module_id].pop(TD_ERROR_KEY)
    return np.asarray(logged.peek()[-1])


def update_on_part(
    rllib_update,
    policy_batches: dict,
    env_steps: int,
    *,
    timesteps,
    update_kwargs: dict[str, Any],
    last: bool,
    whole_batch: bool = False,
    num_epochs: int | None = None,
    minibatch_size: int | None = None,
):
    """One RLlib ``Learner.update`` (``rllib_update``, bound) on some modules' rows of an
    iteration's batch; the iteration's metrics are reduced on the ``last`` one.
    ``update_kwargs`` (RLlib's ``num_epochs``, ``minibatch_size``,
    ``shuffle_batch_per_epoch``, ``num_total_minibatches``) are used as they are, or with
    ``whole_batch`` as one step on the whole batch per epoch, or with ``num_epochs`` and
    ``minibatch_size`` replaced (every data-parallel learner then takes the minibatch
    steps of the largest module batch of any shard).

    Relies on: ``Learner.update`` reduces its metrics unless ``_no_metrics_reduce``,
    iterates ``num_total_minibatches`` minibatches when > 0 (``LearnerGroup`` sets it so
    that DDP learners step together) and passes a ``TrainingData`` batch through."""
    kwargs = {k: v for k, v in update_kwargs.items() if k != "_no_metrics_reduce"}
    if num_epochs is not None:
        kwargs.pop("num_total_minibatches", None)
        kwargs.update(num_epochs=num_epochs, minibatch_size=minibatch_size)
        if data_parallel():
            rows = max(len(b) for b in policy_batches.values())
            steps = minibatch_steps(num_epochs, rows, minibatch_size)
            kwargs["num_total_minibatches"] = max_over_learners(steps)
    elif whole_batch:
        kwargs.update(minibatch_size=None, num_total_minibatches=0)
    return rllib_update(
        training_data=TrainingData(batch=MultiAgentBatch(policy_batches, env_steps)),
        timesteps=timesteps,
        _no_metrics_reduce=not last,
        **kwargs,
    )


def learner_batch(learner, training_data):
    """The learner-connector ``MultiAgentBatch`` of ``training_data``, built once.

    Relies on: ``Learner.update`` turns its ``TrainingData`` into that batch in
    ``_make_batch_if_necessary`` and passes a given batch through unchanged."""
    with pause_cyclic_gc():  # thousands of small episode chunks from batched rollouts
        return learner._make_batch_if_necessary(training_data)


class ObservesBatchBeforeLoss:
    """Learner mixin (list it before the RLlib learner): ``observe(batch)`` sees every
    update's tensor batch before the loss is taken, outside autograd's graph (running
    statistics such as state moments belong there, not inside the loss).

    Relies on: ``TorchLearner._update(batch)`` receives the update's batch as a dict of
    tensors keyed by module id and runs the loss and the optimizer step."""

    def observe(self, batch: dict[str, Any]) -> None:
        raise NotImplementedError

    @override(Learner)
    def _update(self, batch: dict[str, Any]):
        self.observe(batch)
        return super()._update(batch)


class CapturesTrainBatch:
    """Learner mixin (list it before the RLlib learner): keeps the batch of the last
    ``update`` in ``last_train_batch``.

    Relies on: ``Learner.update`` turns its ``TrainingData`` into the learner-connector
    output ``MultiAgentBatch`` in ``_make_batch_if_necessary``."""

    last_train_batch = None

    @override(Learner)
    def _make_batch_if_necessary(self, training_data):
        batch = super()._make_batch_if_necessary(training_data)
        self.last_train_batch = batch
        return batch


class SameModuleOrderOnEveryLearner:
    """Learner mixin (list it before the RLlib learner): every learner runs its modules
    in sorted module-id order.

    Relies on: ``MultiRLModule.forward_train`` runs the modules in the batch's key
    order, so the summed loss's backward issues each module's DDP all-reduce in that
    order, on one process group; the learner connector orders modules by their first
    appearance in a shard's episodes, which differs between shards of a multi-policy
    batch (measured: gloo aborts with "Received data size doesn't match" on mixed
    teams). ``Learner.update`` builds its batch in ``_make_batch_if_necessary``."""

    @override(Learner)
    def _make_batch_if_necessary(self, training_data):
        batch = super()._make_batch_if_necessary(training_data)
        ordered = {mid: batch.policy_batches[mid] for mid in sorted(batch.policy_batches)}
        return MultiAgentBatch(ordered, batch.env_steps())


class BuildsReplayBuffer:
    """Algorithm mixin (list it before the RLlib algorithm): ``replay_buffer(build_default,
    buffer_config)`` returns the buffer, RLlib's (``build_default()``), another, or None.

    Relies on: off-policy ``Algorithm.setup`` builds its local buffer in
    ``_create_local_replay_buffer_if_necessary(config)``."""

    @override(Algorithm)
    def _create_local_replay_buffer_if_necessary(self, config):
        build_default = functools.partial(super()._create_local_replay_buffer_if_necessary, config)
        return self.replay_buffer(build_default, dict(config["replay_buffer_config"]))

    def replay_buffer(self, build_default, buffer_config: dict):
        return build_default()


# ---- replay-buffer internals -----------------------------------------------------------
def priority_trees(buffer, module_id: str | None = None):
    """``(sum_tree, last_sampled_indices, alpha)`` of a prioritized episode buffer.

    Relies on: ``PrioritizedEpisodeReplayBuffer`` keeps ``p ** alpha`` in
    ``_sum_segment`` and the indices of the last ``sample()`` in
    ``_last_sampled_indices``; the multi-agent buffer keeps one of each per module in
    ``_module_to_sum_segment`` / ``_module_to_last_sampled_indices``."""
    if module_id is None:
        return buffer._sum_segment, buffer._last_sampled_indices, buffer._alpha
    return (
        buffer._module_to_sum_segment[module_id],
        buffer._module_to_last_sampled_indices[module_id],
        buffer._alpha,
    )
