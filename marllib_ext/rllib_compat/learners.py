"""RLlib learner internals: the plain module behind DDP, extra loss terms, the batch an
update builds, and mixins that see or order it."""

from __future__ import annotations

from typing import Any

import numpy as np
import tree
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.policy.sample_batch import MultiAgentBatch
from ray.rllib.utils.annotations import override

from marllib_ext.rllib_compat.data_parallel import (
    average_over_learners,
    copy_first_learners_tensors,
    data_parallel,
)
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


class AveragesGradientsOverLearners:
    """Learner mixin (list it before the RLlib learner) for losses that span modules
    outside their ``forward_train`` (team replay's): with several learners no module is
    wrapped in DDP, whose all-reduce follows ``forward_train``'s outputs. Instead every
    learner starts from the first learner's weights, and each update's gradients are
    averaged over the learners before they are clipped and applied; the learners then
    take identical steps.

    Relies on: ``TorchLearner.build`` wraps the modules in
    ``_make_modules_ddp_if_necessary()`` after the modules and optimizers exist;
    ``_uncompiled_update`` runs ``forward_train``, ``compute_losses``,
    ``compute_gradients`` (``{param_ref: param.grad}``, the same order on every
    learner), ``postprocess_gradients`` and ``apply_gradients``, inside every module's
    DDP ``no_sync()`` when ``num_learners > 1``."""

    @override(TorchLearner)
    def _make_modules_ddp_if_necessary(self) -> None:
        copy_first_learners_tensors(
            [
                tensor
                for module_id in sorted(self.module.keys())
                for tensor in self.module[module_id].state_dict().values()
            ]
        )

    @override(TorchLearner)
    def _uncompiled_update(self, batch: dict[str, Any], **kwargs):
        if not data_parallel():
            return super()._uncompiled_update(batch, **kwargs)
        # RLlib's steps without the DDP wrappers' no_sync(): no module is wrapped.
        self._compute_off_policyness(batch)
        fwd_out = self.module.forward_train(batch)
        losses = self.compute_losses(fwd_out=fwd_out, batch=batch)
        gradients = self.compute_gradients(losses)
        self.apply_gradients(self.postprocess_gradients(gradients))
        return fwd_out, losses, {}

    @override(TorchLearner)
    def compute_gradients(self, loss_per_module, **kwargs):
        gradients = super().compute_gradients(loss_per_module, **kwargs)
        average_over_learners([g for g in gradients.values() if g is not None])
        return gradients


class RestoresOptimizerStateUnshared:
    """Learner mixin (list it before the RLlib learner): a restored optimizer state is
    the learner's own copy.

    Relies on: ``TorchLearner._set_optimizer_state`` turns the state's numpy arrays into
    tensors with ``torch.from_numpy`` (no copy), and the optimizer's ``load_state_dict``
    keeps tensors already of its device and dtype. Remote learners receive the state
    through ``ray.get``, which hands every learner on a node the same read-only arrays
    of the object store: without the copy their Adam/RMSprop moments were one buffer,
    stepped by each learner in turn (measured: two data-parallel learners restored from
    one state parted after one update)."""

    @override(TorchLearner)
    def _set_optimizer_state(self, state) -> None:
        owned = tree.map_structure(
            lambda value: value.copy() if isinstance(value, np.ndarray) else value, state
        )
        super()._set_optimizer_state(owned)
