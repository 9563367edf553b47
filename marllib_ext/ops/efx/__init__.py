"""EFXplorer conservative exploration (seed 000), pure numpy, time-major.

Notation per episode segment (T = the segment's last step: episode end, or the chunk
end when the sampler cut the episode):

    r_int[t, i] = -c * log pi_i(a_i | o_i)          intrinsic reward, c = intrinsic_coef
    delta[t]    = sum_i r_int[t, i]                   team intrinsic reward
    z[0] = z_0,  z[t+1] = clip(z[t] - delta[t], z_low, z_high)   budget (undiscounted)
    S[t]        = sum_{k=t..T} delta[k] - z[t]        budget slack
    A[T] = min(A_ext[T], S[T]),  A[t] = min(A_ext[t], A[t+1])
         = min(A_ext[t], ..., A_ext[T], S[T])         conservative advantage

Without clipping, ``S`` is constant within a segment (seed eq. 1.3: S_t = S_{t+1}).
No intrinsic value function is used (``budget_bonus_coeff``, below, puts the capped
intrinsic reward into the one critic's target instead).

Budget units: z is the team intrinsic return the episode still has to collect, in
``[0, Z_max]`` with ``Z_max = c * T_max * sum_i H_max(i)`` (:func:`intrinsic_budget_bound`).

Advantage forms (``efx_advantage``):

    seed_dp:   A[t] = min(A_ext[t..T], S[T])                         (seed 000, reference)
    per_step:  A[t] = min(Â_ext[t], kappa * S[t] / (z_high - z_low))
    hinge:     A[t] = min(Â_ext[t], kappa * S[t] / (z_high - z_low))  where S[t] < 0,
               A[t] = Â_ext[t]                                       elsewhere

    demand_push: A[t, i] = hinge[t] + w[t] * (-log pi_i(a|o_t) - H_i(o_t)),
               w[t] = kappa * min(1, max(0, -S[t]) / (z_high - floor))

with ``Â_ext`` the extrinsic advantage standardized over valid rows. ``hinge`` leaves a
row's own extrinsic signal untouched unless the episode is short of its budget there.
``demand_push`` adds, on rows whose segment is short of its budget, each agent's
per-step intrinsic advantage with the policy's own entropy as the state baseline,
weighted by the shortfall: its expected policy gradient is ``w[t] * grad H_i(o_t)``, a
push toward higher intrinsic reward at every unmet state. Rows that meet their budget
get ``w = 0``: the conservative extrinsic advantage alone. ``floor`` is ``z_low``, or
with ``budget_range: tracked`` the team's intrinsic return without a demand
(:class:`BudgetController`). ``push_scale: unit`` divides the push's signal by its RMS
over each agent's rows of a rollout block (:func:`unit_scale`), so that ``w = 1`` pushes
as hard as a standardized advantage.

``budget_bonus_coeff > 0`` adds ``beta * min(delta[t], max(z[t], 0))`` to the team
reward before GAE (:func:`budget_capped_intrinsic`): the intrinsic reward as a reward,
paid up to the episode's budget, so the critic values novelty until the budget is met
and the policy at ``z = 0`` is trained on the extrinsic reward alone.
"""

from marllib_ext.ops.efx.budget import (
    GAUSSIAN_ENTROPY_UNIT_STD,
    budget_capped_intrinsic,
    budget_path,
    budget_slack,
    budget_step,
    intrinsic_budget_bound,
    intrinsic_rewards,
    max_action_entropy,
)
from marllib_ext.ops.efx.conservative import conservative_advantage, seed_dp_binding, segment_slack
from marllib_ext.ops.efx.forms import (
    EFX_ADVANTAGE_FORMS,
    PUSH_FORMS,
    PUSH_SCALES,
    demand_push_advantage,
    demand_push_term,
    entropy_baselined_intrinsic_advantage,
    shortfall_weight,
    slack_cap_advantage,
    unit_scale,
)
from marllib_ext.ops.efx.outer_loop import (
    BUDGET_RANGES,
    Z_OPTIMIZERS,
    Z_SAMPLING_MODES,
    BudgetController,
    largest_budget_within,
    sample_initial_budget,
)

__all__ = [
    "BUDGET_RANGES",
    "EFX_ADVANTAGE_FORMS",
    "PUSH_FORMS",
    "GAUSSIAN_ENTROPY_UNIT_STD",
    "Z_OPTIMIZERS",
    "Z_SAMPLING_MODES",
    "BudgetController",
    "budget_capped_intrinsic",
    "budget_path",
    "budget_slack",
    "budget_step",
    "conservative_advantage",
    "demand_push_advantage",
    "demand_push_term",
    "PUSH_SCALES",
    "unit_scale",
    "entropy_baselined_intrinsic_advantage",
    "intrinsic_budget_bound",
    "intrinsic_rewards",
    "largest_budget_within",
    "max_action_entropy",
    "sample_initial_budget",
    "seed_dp_binding",
    "segment_slack",
    "shortfall_weight",
    "slack_cap_advantage",
]
