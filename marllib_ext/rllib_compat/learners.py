"""RLlib learner internals: the plain module behind DDP, extra loss terms, the batch an
update builds, and mixins that see or order it."""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core.learner.learner import Learner
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.policy.sample_batch import MultiAgentBatch
from ray.rllib.utils.annotations import override

from marllib_ext.rllib_compat.episodes import as_sorted_agents_episode


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


def local_learner(algorithm: Algorithm) -> Learner:
    """The learner that runs in the driver (``num_learners`` 0); for tests and
    diagnostics that read a learner's modules or call its losses.

    Relies on: ``LearnerGroup`` keeps its local learner in ``_learner`` (``None`` when
    the learners are remote)."""
    learner = algorithm.learner_group._learner
    if learner is None:
        raise ValueError("the learners are remote (num_learners >= 1); no local learner")
    return learner


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


class ReadsEpisodesAsSortedAgents:
    """Learner mixin (list it before the RLlib learner): the episodes of every update
    are read as ``episodes.SortedAgentsEpisode`` (those a replay buffer builds as
    RLlib's class too), so the learner connectors build each module's rows in sorted
    agent order whatever the process's hash seed.

    Relies on: ``Learner.update`` hands its ``TrainingData`` (episodes resolved) to
    ``_make_batch_if_necessary``, which runs the learner connectors on
    ``training_data.episodes``."""

    @override(Learner)
    def _make_batch_if_necessary(self, training_data):
        for episode in training_data.episodes or ():
            if isinstance(episode, MultiAgentEpisode):
                as_sorted_agents_episode(episode)
        return super()._make_batch_if_necessary(training_data)
