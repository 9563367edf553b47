"""Trust-region learners: ``itrpo`` (independent), ``matrpo`` (MAPPO's central critic)
and ``hatrpo`` (HAPPO's order and factor ``M``).

Their schedules (:data:`marllib_ext.algos.ppo.schedule.TRPO`, ``HATRPO``): every actor
policy takes one trust-region step on its whole batch (:mod:`marllib_ext.ops.trust_region`),
then the value functions take their epochs of SGD (``critic_lr``, ``critic_epochs``,
``critic_minibatch_size``) on the same batch.

The step maximizes the surrogate ``L = mean(r * A)`` (``r = pi / pi_old`` of the taken
action, no entropy term, as in TRPO) subject to ``mean KL(pi_old || pi) <= delta``
(``kl_threshold``). The Fisher matrix is the Hessian of the mean KL of the current
policy against itself (detached), at the parameters the batch was sampled with, over
every row or every ``fisher_subsample``-th row.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import tree
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override

from marllib_ext.algos.happo.learner import HAPPOAdvantageConnector
from marllib_ext.algos.ppo.learners import JointCriticPPOLearner, PPOLearner, own_value_loss
from marllib_ext.algos.ppo.phased import FACTOR_MEAN
from marllib_ext.algos.ppo.schedule import HAPPO_FACTOR
from marllib_ext.ops.trust_region import (
    backtracking_line_search,
    conjugate_gradient,
    fisher_vector_product,
    flat,
    max_step_size,
)
from marllib_ext.rllib_compat import plain_module, sum_over_learners

# Per actor module, logged each iteration (window 1).
KL_AFTER_STEP = "tr_kl"  # mean KL(pi_old || pi) after the step (0 when rejected)
LINE_SEARCH_STEPS = "tr_line_search_steps"  # candidates evaluated
STEP_ACCEPTED = "tr_accepted"  # 1.0 accepted, 0.0 rejected (its mean: acceptance rate)
SURROGATE_GAIN = "tr_improvement"  # L(theta_new) - L(theta_old)
STEP_SIZE = "tr_step_size"  # beta = sqrt(2 delta / s^T F s)
CG_SECONDS = "tr_cg_s"  # wall time of the Fisher setup and conjugate gradient
LINE_SEARCH_SECONDS = "tr_line_search_s"  # wall time of the line search

# RLlib's default PPO module: the value function's parameters (its own encoder when
# vf_share_layers is false, and the value head).
VALUE_PARAMETER_PREFIXES = ("vf.", "encoder.critic_encoder.")


def global_mean_share(batch: dict[str, Any]):
    """``values -> sum(values over this learner's loss-mask rows) / N``, ``N`` the rows
    of every data-parallel learner: summed over the learners, the mean over all rows."""
    mask = batch.get(Columns.LOSS_MASK)
    rows = batch[Columns.ADVANTAGES].new_tensor(
        float(mask.sum()) if mask is not None else float(len(batch[Columns.ADVANTAGES]))
    )
    total = sum_over_learners(rows.double())

    def share(values: torch.Tensor) -> torch.Tensor:
        return (values if mask is None else values[mask]).sum() / total.to(values.dtype)

    return share


def every_kth_row(batch: dict[str, Any], k: int) -> dict[str, Any]:
    """Rows (sequences, for ``[N, L]`` columns) ``0, k, 2k, ...`` of every column."""
    return tree.map_structure(lambda column: column[::k], dict(batch))


def policy_parameters(module) -> list[torch.nn.Parameter]:
    """The actor's trainable parameters of an RLlib PPO module: all but the value
    function's (a shared encoder is the actor's)."""
    return [
        p
        for name, p in module.named_parameters()
        if p.requires_grad and not name.startswith(VALUE_PARAMETER_PREFIXES)
    ]


class TrustRegionActors:
    """Learner mixin: the ``trust_region`` step kind, one whole-batch trust-region step
    per actor module of the phase."""

    def trust_region_step(self, phase, module_batches: dict, context) -> None:
        """Each module's step on its rows, advantages weighted by the phase's
        ``HAPPO_FACTOR`` column where it wrote one."""
        for module_id, module_batch in module_batches.items():
            columns = dict(module_batch)
            factor = columns.get(HAPPO_FACTOR)
            if factor is not None:
                self.metrics.log_value((module_id, FACTOR_MEAN), factor.mean(), window=1)
            self.trust_region_module_step(module_id, columns, factor=factor)

    def trust_region_module_step(
        self, module_id: str, batch: dict[str, Any], factor: torch.Tensor | None = None
    ) -> dict[str, float]:
        """One step of ``module_id`` on ``batch`` (its whole batch), the advantages
        weighted by ``factor`` (HATRPO's ``M``) when given; logs and returns the step's
        statistics."""
        settings = self.settings
        module = plain_module(self.module, module_id)
        params = policy_parameters(module)
        dist_class = module.get_train_action_dist_cls()
        sampled = module.get_exploration_action_dist_cls().from_logits(
            batch[Columns.ACTION_DIST_INPUTS]
        )
        advantages = batch[Columns.ADVANTAGES]
        if factor is not None:
            advantages = advantages * factor
        share = global_mean_share(batch)
        actions, old_logp = batch[Columns.ACTIONS], batch[Columns.ACTION_LOGP]

        def surrogate_and_dist(dist_inputs):
            dist = dist_class.from_logits(dist_inputs)
            surrogate = share(torch.exp(dist.logp(actions) - old_logp) * advantages)
            return surrogate, dist

        # With data-parallel learners each term below is this learner's share of the
        # mean over every learner's rows; summing the shares (and the gradients and
        # Fisher-vector products taken from them) gives every learner the same step.
        dist_inputs = module.forward_train(dict(batch))[Columns.ACTION_DIST_INPUTS]
        surrogate, dist = surrogate_and_dist(dist_inputs)
        gradient = sum_over_learners(
            flat(
                torch.autograd.grad(surrogate, params, retain_graph=True, allow_unused=True),
                params,
            )
        )
        started = time.perf_counter()
        if settings.fisher_subsample > 1:
            rows = every_kth_row(batch, settings.fisher_subsample)
            fisher_inputs = module.forward_train(dict(rows))[Columns.ACTION_DIST_INPUTS]
            fisher_dist = dist_class.from_logits(fisher_inputs)
            fisher_share = global_mean_share(rows)
        else:  # the surrogate's forward pass
            fisher_inputs, fisher_dist, fisher_share = dist_inputs, dist, share
        self_kl = fisher_share(dist_class.from_logits(fisher_inputs.detach()).kl(fisher_dist))
        local_product = fisher_vector_product(self_kl, params, damping=0.0)

        def product(vector: torch.Tensor) -> torch.Tensor:
            return sum_over_learners(local_product(vector)) + settings.cg_damping * vector

        direction = conjugate_gradient(product, gradient.detach(), settings.cg_iterations)
        beta = max_step_size(direction, product(direction), settings.kl_threshold)
        full_step = beta * direction
        cg_done = time.perf_counter()

        def evaluate() -> tuple[float, float]:
            with torch.no_grad():
                new_inputs = module.forward_train(dict(batch))[Columns.ACTION_DIST_INPUTS]
                new_surrogate, new_dist = surrogate_and_dist(new_inputs)
                totals = sum_over_learners(
                    torch.stack([new_surrogate, share(sampled.kl(new_dist))]).double()
                )
            return float(totals[0]), float(totals[1])

        result = backtracking_line_search(
            params,
            full_step,
            evaluate,
            surrogate_before=float(sum_over_learners(surrogate.detach().double())),
            expected_improvement=float(gradient @ full_step),
            delta=settings.kl_threshold,
            backtrack_coef=settings.backtrack_coef,
            max_steps=settings.line_search_steps,
            accept_ratio=settings.accept_ratio,
        )
        searched = time.perf_counter()
        stats = {
            KL_AFTER_STEP: result.kl if result.accepted else 0.0,
            LINE_SEARCH_STEPS: float(result.steps),
            STEP_ACCEPTED: float(result.accepted),
            SURROGATE_GAIN: result.improvement if result.accepted else 0.0,
            STEP_SIZE: beta,
            CG_SECONDS: cg_done - started,
            LINE_SEARCH_SECONDS: searched - cg_done,
        }
        self.metrics.log_dict(stats, key=module_id, window=1)
        return stats


class ITRPOLearner(TrustRegionActors, PPOLearner):
    """Independent TRPO: RLlib's GAE on each policy's own value head; each policy takes
    a trust-region step, then the value heads their SGD epochs (value loss only)."""

    @override(PPOTorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        # The actor's outputs enter with weight 0: with data-parallel learners DDP's
        # static graph expects every parameter of the wrapped forward in every loss
        # (their gradients are 0; the actor moves only by the trust-region step).
        unused_actor = 0.0 * fwd_out[Columns.ACTION_DIST_INPUTS].sum()
        return own_value_loss(self, module_id, config, batch, fwd_out) + unused_actor


class MATRPOLearner(TrustRegionActors, JointCriticPPOLearner):
    """MATRPO: trust-region actors on the joint critic's team advantages; the critics
    take their SGD epochs after the actors' steps."""


class HATRPOLearner(MATRPOLearner):
    """HATRPO: MATRPO's steps in a drawn order, each weighted by HAPPO's factor ``M``
    (the team-row column comes from HAPPO's advantage connector)."""

    advantage_connector_class = HAPPOAdvantageConnector
