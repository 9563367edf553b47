"""``TeamReplayLearner``: the one learner base of every team-replay algorithm.

The base reads the agent/team layout, builds the optimizers, runs one ``team_loss`` per
team module on the replayed batch, turns the TD errors into the replay priorities of
``per_type`` and syncs the targets. An algorithm overrides ``team_loss`` (and, where it
needs them, ``rows_view`` and ``whole_batch_columns`` for quantities every team shares,
``optimizer_for`` and ``target_step``).

Targets, one convention: an agent's or actor's target is the learner-only module
``target_<policy>``; every other module with a target (critics, mixers) keeps it inside
and exposes ``sync_target(tau)``. ``sync_targets(tau)`` moves all of them.

Data-parallel learners (``num_learners >= 2``): every learner gets the whole replayed
batch, takes its running statistics from all of it, trains on its own contiguous share
of the rows and averages its gradients with the others'
(``rllib_compat.AveragesGradientsOverLearners``); its priorities cover its share, and
the algorithm joins them in learner order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override

from marllib_ext.algos.team_replay.algorithm import LAYOUT_KEY
from marllib_ext.algos.team_replay.settings import TeamReplaySettings
from marllib_ext.policies.q_agent import TARGET_PREFIX, polyak_update, target_module_id
from marllib_ext.rllib_compat import (
    AveragesGradientsOverLearners,
    ObservesBatchBeforeLoss,
    RestoresOptimizerStateUnshared,
    hand_priorities_to_replay,
    learner_value,
    settings_of,
    this_learners_rows,
)


@dataclass
class TeamLoss:
    """One team's loss on a replayed batch.

    ``td_errors``: ``(B, L, groups)`` detached TD errors (one group per team, or one per
    agent for independent learners); ``valid``: ``(B, L)`` real steps; ``terms``: the
    named terms the loss is built from (``values``, ``targets``, ...; not detached);
    ``metrics``: detached diagnostics logged under the team's module id."""

    loss: torch.Tensor
    td_errors: torch.Tensor
    valid: torch.Tensor
    terms: dict[str, torch.Tensor | None] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


class TeamReplayLearner(
    ObservesBatchBeforeLoss,
    AveragesGradientsOverLearners,
    RestoresOptimizerStateUnshared,
    TorchLearner,
):
    """See the module docstring."""

    @override(TorchLearner)
    def build(self) -> None:
        # Before super().build(): it configures the optimizers, which read the settings.
        self.settings: TeamReplaySettings = settings_of(self.config)
        super().build()
        layout = learner_value(self.config, LAYOUT_KEY)
        self.agents: tuple[str, ...] = tuple(layout["agents"])
        self.policy_of: dict[str, str] = dict(layout["policy_of"])
        self.obs_dim_of: dict[str, int] = dict(layout["obs_dim_of"])
        self.teams: dict[str, list[int]] = {
            mid: list(index) for mid, index in layout["teams"].items()
        }
        self.policies = sorted(set(self.policy_of.values()))
        # Policies with a target copy (DDPG's actors, joint-Q agents; not soft actors).
        self.targeted_policies = [p for p in self.policies if target_module_id(p) in self.module]
        for policy in self.targeted_policies:
            target = self.module[target_module_id(policy)]
            target.load_state_dict(self.module[policy].state_dict())
            target.requires_grad_(False)

    # ---- hooks ----------------------------------------------------------------------------
    def team_loss(self, *, module_id: str, agent_index: list[int], view: Any) -> TeamLoss:
        """The loss of the team whose module is ``module_id`` (agents ``agent_index``,
        indices into the sorted agent list) on the batch ``view``."""
        raise NotImplementedError

    def rows_view(self, columns: dict[str, torch.Tensor]) -> Any:
        """Quantities every team's loss reads, computed once per batch from the rows this
        learner trains on (default: the columns themselves)."""
        return columns

    def whole_batch_columns(self, columns: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The replayed columns with what is taken over the whole batch applied (its
        reward moments), before data-parallel learners take their rows (default: the
        columns themselves)."""
        return columns

    def batch_view(self, columns: dict[str, torch.Tensor]) -> Any:
        """What the team losses read of a replayed batch: ``whole_batch_columns`` on all
        of it, then ``rows_view`` on this learner's rows. Data-parallel learners each get
        the whole batch (``observe`` keeps the same running moments on each) and train on
        their own share of its rows; one learner trains on every row."""
        whole = self.whole_batch_columns(columns)
        rows = this_learners_rows(len(whole["mask"]))
        return self.rows_view({name: column[rows] for name, column in whole.items()})

    def optimizer_for(
        self, module_id: str, params: list[torch.nn.Parameter]
    ) -> tuple[torch.optim.Optimizer, float]:
        """The optimizer of a trained module and its learning rate."""
        raise NotImplementedError

    def target_step(self, timesteps: dict[str, Any]) -> float | None:
        """The Polyak step of every target after this update; ``None``: no sync."""
        return self.settings.tau

    def observe_batch(self, columns: dict[str, torch.Tensor]) -> None:
        """Updates running statistics (state moments) from the replayed columns before
        the loss is taken; nothing by default."""

    # ---- RLlib ----------------------------------------------------------------------------
    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        params = [p for p in self.get_parameters(self.module[module_id]) if p.requires_grad]
        if module_id.startswith(TARGET_PREFIX) or not params:
            return
        optimizer, lr = self.optimizer_for(module_id, params)
        self.register_optimizer(
            module_id=module_id, optimizer=optimizer, params=params, lr_or_lr_schedule=lr
        )

    @override(ObservesBatchBeforeLoss)
    def observe(self, batch: dict[str, Any]) -> None:
        with torch.no_grad():
            self.observe_batch(batch[self.first_team])

    @property
    def first_team(self) -> str:
        """Every team module gets the same replayed batch; this one carries the
        priorities back."""
        return next(iter(self.teams))

    @override(TorchLearner)
    def compute_losses(self, *, fwd_out, batch) -> dict[str, Any]:
        view = self.batch_view(batch[self.first_team])
        losses, td_errors = {}, []
        for module_id, agent_index in self.teams.items():
            term = self.team_loss(module_id=module_id, agent_index=agent_index, view=view)
            losses[module_id] = term.loss
            td_errors.append(term.td_errors)
            self.metrics.log_dict(
                {
                    **term.metrics,
                    "td_error_abs": term.td_errors.abs().mean(-1)[term.valid].mean(),
                },
                key=module_id,
                window=1,
            )
        self._hand_over_priorities(torch.cat(td_errors, dim=-1))
        return losses

    def _hand_over_priorities(self, td_errors: torch.Tensor) -> None:
        """Per-step priorities ``(B, L)``: the ``per_type`` rule on every group's TD
        error, averaged over the groups (teams, or agents of independent learners)."""
        td = td_errors.detach().to(torch.float64).cpu()
        priority, _ = self.settings.priority_rule.priorities(td.reshape(-1), self.settings)
        priorities = priority.reshape(td.shape).mean(dim=-1)
        hand_priorities_to_replay(self.metrics, self.first_team, priorities.numpy())

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        raise NotImplementedError("the team loss spans modules: see compute_losses")

    @override(TorchLearner)
    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        tau = self.target_step(timesteps)
        if tau is not None:
            self.sync_targets(tau)

    def sync_targets(self, tau: float) -> None:
        """``target <- tau * online + (1 - tau) * target`` for every target (``tau = 1``:
        a hard copy)."""
        for policy in self.targeted_policies:
            polyak_update(self.module[target_module_id(policy)], self.module[policy], tau)
        for module_id in self.module.keys():  # noqa: SIM118 - MultiRLModule has no __iter__
            module = self.module[module_id]
            if not module_id.startswith(TARGET_PREFIX) and hasattr(module, "sync_target"):
                module.sync_target(tau)
