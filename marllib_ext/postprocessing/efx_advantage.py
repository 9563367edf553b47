"""Learner connector injecting EFXplorer's conservative advantage into the team GAE
(its hooks on the team arrays: ``efx_block.EFXBlockHooks``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from marllib_ext.ops.advantages import standardize_valid
from marllib_ext.ops.efx import (
    EFX_ADVANTAGE_FORMS,
    PUSH_FORMS,
    budget_capped_intrinsic,
    conservative_advantage,
    seed_dp_binding,
    segment_slack,
    shortfall_weight,
    slack_cap_advantage,
)
from marllib_ext.postprocessing.budget_input import team_of_critic
from marllib_ext.postprocessing.efx_block import EFXBlockHooks
from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector
from marllib_ext.postprocessing.vd_advantage import VDJointAdvantageConnector

A_EXT_MEAN = "efx_advantage_ext_mean"
A_FINAL_MEAN = "efx_advantage_final_mean"
BINDING_FRACTION = "efx_binding_fraction"  # valid rows whose advantage is the S term
DEMAND_MET_FRACTION = "efx_demand_met_fraction"  # episodes that collected their budget
SLACK_MEAN = "efx_slack_mean"
TEAM_INTRINSIC_REWARD_MEAN = "efx_team_intrinsic_reward_mean"
BUDGET_MEAN = "efx_budget_in_batch_mean"
Z0_MEAN = "efx_z0_mean"  # mean z_0 of the episodes that start in this batch
BUDGET = "efx_budget_z"  # the controller's budget as last broadcast to the learner
# demand_push: valid team rows short of their budget, mean shortfall weight w over valid
# rows, and mean / mean |.| of the shortfall-weighted term w * (-log pi - H) over agent rows
UNMET_ROW_FRACTION = "efx_unmet_row_fraction"
PUSH_WEIGHT_MEAN = "efx_push_weight_mean"
PUSH_TERM_MEAN = "efx_push_term_mean"
PUSH_TERM_ABS_MEAN = "efx_push_term_abs_mean"
# push_gradient: temperature: the push of each agent row, kept out of ADVANTAGES
PUSH_ADVANTAGES = "efx_push_advantages"
# What the cap does to extrinsic learning: valid rows whose positive Â_ext the slack term
# replaced; on rows with a positive team reward, the mean Â_ext and the mean capped
# advantage (both standardized over valid rows, before any push); valid rows at z_low.
CAPPED_POSITIVE_FRACTION = "efx_capped_positive_fraction"
REWARDED_ADVANTAGE_EXT = "efx_rewarded_advantage_ext"
REWARDED_ADVANTAGE_FINAL = "efx_rewarded_advantage_final"
ZERO_BUDGET_ROW_FRACTION = "efx_zero_budget_row_fraction"
# budget_bonus_coeff > 0: the valid rows whose intrinsic reward the budget cut (the
# episode had met its budget); the bonus paid is the joint critic's reward_bonus_mean.
BUDGET_BONUS_CUT_FRACTION = "efx_budget_bonus_cut_fraction"


class EFXJointAdvantageConnector(EFXBlockHooks, JointAdvantageConnector):
    """Team GAE on the joint critic, then EFX's conservative advantage per segment
    (``EFXBlockHooks``).

    On a mixed env each team's critic has its own connector, budget range and
    intrinsic reward (its own agents' log-probs only).

    Preconditions beyond ``JointAdvantageConnector``: every actor observation carries
    the budget appended by ``BudgetObservationConnector`` (read back with
    ``BudgetInput``, so z is exactly what the actor saw) and ``ACTION_LOGP`` holds the
    log-probs logged at sampling. ``delta_t = -intrinsic_coef * sum_i logp_i``;
    segments end where a world's episode ended or its block (or chunk) was cut. The critic
    sees ``[state, z normalized]`` and is trained on extrinsic value targets only.

    ``advantage_form`` (see ``marllib_ext.ops.efx``): ``seed_dp`` applies
    ``min(A_ext[t..T], S[T])`` to the raw team advantages; ``per_step`` and ``hinge``
    cap the standardized ``Â_ext[t]`` by ``kappa * S[t] / (z_high - z_low)``. The base
    connector standardizes the result again. ``demand_push`` takes ``hinge``'s team
    advantage and then adds, to every agent row of a segment short of its budget,
    ``w[t] = kappa * max(0, -S[t]) / demand_range`` times ``-log pi_i(a|o) - H_i(o)``
    (:func:`marllib_ext.ops.efx.demand_push_advantage`); the entropies come from the
    action-distribution inputs logged at sampling. ``demand_range`` is
    ``z_high - z_low``, or with ``budget_range: tracked`` the controller's
    ``demand_range`` as last broadcast.
    """

    def __init__(self, *args, settings: Any, **kwargs) -> None:
        """``settings``: EFX settings with the budget resolved (``intrinsic_coef``,
        ``team_budgets``, ``efx_advantage``, ``efx_kappa``); this connector's critic
        serves the team whose budget range it uses."""
        super().__init__(*args, settings=settings, **kwargs)
        if settings.efx_advantage not in EFX_ADVANTAGE_FORMS:
            raise ValueError(f"efx_advantage must be one of {EFX_ADVANTAGE_FORMS}")
        self.intrinsic_coef = float(settings.intrinsic_coef)
        self.team = team_of_critic(settings.team_budgets, self.critic_module_id)
        self.budget_input = self.team.input
        self.advantage_form = settings.efx_advantage
        self.kappa = float(settings.efx_kappa)
        # settings pickled before push_scale existed read back as raw
        self.push_scale = getattr(settings, "push_scale", "raw")
        self.push_credit = getattr(settings, "push_credit", "step")
        self.budget_bonus_coeff = float(getattr(settings, "budget_bonus_coeff", 0.0))
        self.budget: float | None = None  # broadcast by the outer loop, for metrics
        # z_high - floor (budget_range: tracked), broadcast by the outer loop
        self.demand_range = self.budget_input.z_range
        if getattr(settings, "push_gradient", "policy") == "temperature":
            self.agent_terms_column = PUSH_ADVANTAGES

    @property
    def pushes(self) -> bool:
        return self.advantage_form in PUSH_FORMS and self.budget_input.z_range > 0

    def conservative(
        self, a_ext: np.ndarray, delta: np.ndarray, z: np.ndarray, ends: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(A_final, binding, S)`` over valid rows for the configured form."""
        slack = segment_slack(delta, z, ends)
        if self.advantage_form == "seed_dp":
            a_final = conservative_advantage(a_ext, delta, z, ends)
            return a_final, seed_dp_binding(a_ext, delta, z, ends), slack
        if self.budget_input.z_range <= 0:  # no budget range: nothing to enforce
            return a_ext.copy(), np.zeros(len(a_ext), dtype=bool), slack
        a_hat = standardize_valid(a_ext, np.ones(len(a_ext), dtype=bool))
        if self.advantage_form == "extrinsic_push":  # no cap: the push alone demands
            return a_hat, np.zeros(len(a_ext), dtype=bool), slack
        a_final, binding = slack_cap_advantage(
            a_hat,
            slack,
            kappa=self.kappa,
            z_range=self.budget_input.z_range,
            only_unmet=self.advantage_form in ("hinge", "demand_push"),
        )
        return a_final, binding, slack

    def push_metrics(self, slack: np.ndarray, pushed: np.ndarray) -> dict:
        """The push's metrics from the slack of the team rows and the terms of the agent
        rows (bootstrap rows left out)."""
        weight = shortfall_weight(slack, kappa=self.kappa, z_range=self.demand_range)
        return {
            UNMET_ROW_FRACTION: float((weight > 0).mean()),
            PUSH_WEIGHT_MEAN: float(weight.mean()),
            PUSH_TERM_MEAN: float(pushed.mean()),
            PUSH_TERM_ABS_MEAN: float(np.abs(pushed).mean()),
        }

    def budget_bonus_metrics(self, delta: np.ndarray, z: np.ndarray) -> dict:
        """How often ``budget_bonus_coeff``'s budget cut the bonus, over the valid team rows
        (none at 0)."""
        if self.budget_bonus_coeff <= 0 or not len(delta):
            return {}
        paid = budget_capped_intrinsic(delta, z)
        return {
            BUDGET_BONUS_CUT_FRACTION: float((paid < delta).mean()),
        }

    def extrinsic_metrics(self, rewards, a_ext, a_final, binding, z) -> dict:
        """How much extrinsic signal the cap removed (valid rows; see the metric names)."""
        every = np.ones(len(a_ext), dtype=bool)
        a_hat = standardize_valid(a_ext, every)
        values = {
            CAPPED_POSITIVE_FRACTION: float((binding & (a_hat > 0)).mean()),
            ZERO_BUDGET_ROW_FRACTION: float((z <= self.budget_input.z_low).mean()),
        }
        rewarded = rewards > 0
        if rewarded.any():
            values[REWARDED_ADVANTAGE_EXT] = float(a_hat[rewarded].mean())
            values[REWARDED_ADVANTAGE_FINAL] = float(
                standardize_valid(a_final, every)[rewarded].mean()
            )
        return values

    def metrics(self, a_ext, a_final, binding, slack, delta, z, *, ends, episode_ends, z0) -> dict:
        """Learner metrics of one batch (``efx_*`` under the critic module's results),
        from its rows in segment order: ``ends`` marks each segment's last row,
        ``episode_ends`` the rows where an episode really ended (not a sampler cut);
        ``z0``: the budgets of the rows where an episode began."""
        # Episodes ending in this batch met their demand when the segment that ends
        # there collected the budget it started with: S >= 0 on its first row.
        segment_starts = np.concatenate([[0], np.flatnonzero(ends)[:-1] + 1])
        really_ended = episode_ends[ends]
        met = slack[segment_starts[really_ended]] >= 0
        values = {
            A_EXT_MEAN: float(a_ext.mean()),
            A_FINAL_MEAN: float(a_final.mean()),
            BINDING_FRACTION: float(binding.mean()),
            SLACK_MEAN: float(slack.mean()),
            TEAM_INTRINSIC_REWARD_MEAN: float(delta.mean()),
            BUDGET_MEAN: float(z.mean()),
        }
        if met.size:
            values[DEMAND_MET_FRACTION] = float(met.mean())
        if z0.size:
            values[Z0_MEAN] = float(z0.mean())
        if self.budget is not None:
            values[BUDGET] = float(self.budget)
        return values


class EFXVDJointAdvantageConnector(EFXJointAdvantageConnector, VDJointAdvantageConnector):
    """Conservative advantage on ``A_ext`` from ``V_tot``; mixer inputs carry z."""

    BLOCK_BATCH_OPTIONS: dict = {"agent_obs": True}
