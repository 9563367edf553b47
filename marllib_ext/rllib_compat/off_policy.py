"""RLlib internals of the off-policy algorithms: the fast path (``algos/roer``), one
``Learner.update`` over K minibatches with SAC's target nets and the replay priorities
handled per gradient step; the priorities a learner hands the replay buffer; the buffer
an algorithm builds, and a prioritized buffer's sum trees."""

from __future__ import annotations

import functools

import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core.learner.learner import Learner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import ALL_MODULES, TD_ERROR_KEY


def last_td_error(metrics, module_id: str):
    """The ``|Q - target|`` RLlib's SAC loss logged for the minibatch just taken, removed.

    Relies on: SAC's torch loss logs it under ``(module_id, TD_ERROR_KEY)`` as an
    ``item_series``, whose ``peek(compile=False)`` lists the items since the last
    reduce, each tensor as a (CPU) nested list."""
    items = metrics.peek((module_id, TD_ERROR_KEY), default=None, compile=False)
    metrics.delete(module_id, TD_ERROR_KEY, key_error=False)
    return None if not items else torch.as_tensor(items[-1], dtype=torch.float32)


class TargetUpdateEveryGradientStep:
    """Learner mixin (before RLlib's SAC learner): with ``per_step_targets`` the target
    nets take their soft update after every gradient step, as in SAC's paper, not once
    per ``update`` call of K minibatches.

    It also checks the gradients for ``nan``/``inf`` in one fused pass (RLlib's
    default checks every tensor apart, a tenth of a small update's time) and zeroes
    them as RLlib does; the algorithm's config sets ``torch_skip_nan_gradients`` so
    that RLlib's own check is not run again.

    Relies on: ``TorchLearner._update`` calls ``apply_gradients`` once per minibatch,
    which with ``torch_skip_nan_gradients`` assigns the gradients unchecked;
    ``DQNLearner.after_gradient_based_update`` soft-updates the targets, then chains
    to ``TorchLearner``'s (learning-rate schedules)."""

    per_step_targets = False

    @override(Learner)
    def apply_gradients(self, gradients_dict) -> None:
        if self.per_step_targets:
            norms = torch.stack(torch._foreach_norm(list(gradients_dict.values())))
            if not bool(torch.isfinite(norms).all()):
                gradients_dict = {k: torch.nan_to_num(g) for k, g in gradients_dict.items()}
        super().apply_gradients(gradients_dict)
        if self.per_step_targets:
            from ray.rllib.core.learner.utils import update_target_network

            for module_id, module in self.module.items():
                tau = self.config.get_config_for_module(module_id).tau
                for main, target in module.unwrapped().get_target_network_pairs():
                    update_target_network(main_net=main, target_net=target, tau=tau)

    @override(Learner)
    def after_gradient_based_update(self, *, timesteps) -> None:
        if not self.per_step_targets:
            return super().after_gradient_based_update(timesteps=timesteps)
        from ray.rllib.algorithms.dqn.dqn_learner import DQNLearner

        return super(DQNLearner, self).after_gradient_based_update(timesteps=timesteps)


class ActorBackwardApart:
    """Learner mixin (before RLlib's SAC learner): with ``fused_backward`` the SAC
    losses of one module take two backward passes instead of one per optimizer: the
    policy loss alone (it reaches the Q nets through ``Q(s, a ~ pi)``, whose gradient
    is not the critics'), then the sum of the others, whose graphs share no
    parameters (the critics' targets, the alpha loss's log-probabilities and ROER's
    value loss's Q are detached). The gradients are those of one pass per optimizer.

    Relies on: ``SACTorchLearner.compute_gradients`` pops each optimizer's loss from
    ``_temp_losses[(module_id, name + "_loss")]`` (SAC's ``policy`` optimizer and the
    others) and reads the gradients of ``_params`` filtered per optimizer."""

    fused_backward = False

    def compute_gradients(self, loss_per_module, **kwargs):
        if not self.fused_backward:
            return super().compute_gradients(loss_per_module, **kwargs)
        grads = {}
        for module_id in sorted(set(loss_per_module) - {ALL_MODULES}):
            optimizers = dict(self.get_optimizers_for_module(module_id))
            losses = {n: self._temp_losses.pop((module_id, n + "_loss")) for n in optimizers}
            for optimizer in optimizers.values():
                optimizer.zero_grad(set_to_none=True)
            losses.pop("policy").backward(retain_graph=True)
            policy = self.filter_param_dict_for_optimizer(self._params, optimizers["policy"])
            grads.update({pid: p.grad for pid, p in policy.items()})
            for name, optimizer in optimizers.items():
                if name != "policy":
                    optimizer.zero_grad(set_to_none=True)
            sum(losses.values()).backward()
            for name, optimizer in optimizers.items():
                if name != "policy":
                    params = self.filter_param_dict_for_optimizer(self._params, optimizer)
                    grads.update({pid: p.grad for pid, p in params.items()})
        assert not self._temp_losses
        return grads


def hand_priorities_to_replay(metrics, module_id: str, priorities) -> None:
    """Makes ``priorities`` the per-sample values that RLlib's (SAC/DQN)
    ``training_step`` passes to the replay buffer's ``update_priorities``.

    Relies on: the training step reads ``learner_results[module_id][TD_ERROR_KEY]``, an
    ``item_series`` the learner logs, as the new priorities."""
    metrics.delete(module_id, TD_ERROR_KEY, key_error=False)
    metrics.log_value(key=(module_id, TD_ERROR_KEY), value=priorities, reduce="item_series")


def priorities_from_learner(learner_results, module_id: str) -> np.ndarray:
    """The priorities a learner handed over with ``hand_priorities_to_replay`` in its
    last update, taken out of one learner's results (so they are not aggregated as a
    metric).

    Relies on: ``LearnerGroup.update`` returns each learner's ``MetricsLogger`` stats
    (not reduced), and an ``item_series`` stat's ``peek()`` lists its items."""
    logged = learner_results[module_id].pop(TD_ERROR_KEY)
    return np.asarray(logged.peek()[-1])


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
