"""Prioritized replay, one home for every replay family (team replay, ROER-SAC).

``per_type`` picks one :class:`PriorityRule`:

- ``uniform``: no priorities;
- ``PER`` (Schaul et al. 2016): priority ``|delta| + eps``, sampling ``p^per_alpha``,
  importance weights ``(N P(i))^-per_importance_beta``, the new priority replaces the old;
- ``KL`` / ``JS`` (ROER, seed 003): priority from the TD error through ``ops.roer``,
  sampling proportional to it, the stored priority an EMA with step ``per_beta``, and
  no importance weights: ROER's priorities reshape the replay distribution on purpose
  (the regularized objective), so the ROER code does not undo them.

So ``per_alpha`` and ``per_importance_beta`` are PER's exponents and act under
``per_type: PER`` only; ``temp``, the clips, the JS weights, ``per_beta`` and
``std_normalize`` are ROER's. The YAML home of these keys is
``configs/algos/_prioritized_replay.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from marllib_ext.ops.roer import (
    gumbel_value_loss,
    js_priority,
    js_value_loss,
    kl_priority,
    per_priority,
    squared_value_loss,
)


@dataclass(frozen=True)
class PrioritizedReplayFields:
    """Settings mixin: the prioritization keys every replay family shares."""

    per_type: str
    temp: float
    min_clip: float
    max_clip: float
    js_min_weight: float
    js_max_weight: float
    per_beta: float
    std_normalize: bool
    per_alpha: float
    per_importance_beta: float

    def checks(self) -> list[tuple[bool, str, str]]:
        return [
            (self.per_type in PRIORITY_RULES, "per_type", f"one of {tuple(PRIORITY_RULES)}"),
            (self.temp > 0, "temp", "must be > 0"),
            (0 < self.min_clip <= self.max_clip, "min_clip", "need 0 < min_clip <= max_clip"),
            (
                0 < self.js_min_weight <= self.js_max_weight,
                "js_min_weight",
                "need 0 < js_min_weight <= js_max_weight",
            ),
            (0 < self.per_beta <= 1, "per_beta", "must be in (0, 1]"),
            (self.per_alpha >= 0, "per_alpha", "must be >= 0"),
            (self.per_importance_beta >= 0, "per_importance_beta", "must be >= 0"),
        ]

    @property
    def priority_rule(self) -> PriorityRule:
        return PRIORITY_RULES[self.per_type]


class PriorityRule:
    """How one ``per_type`` turns TD errors into priorities and samples with them."""

    name = "uniform"
    prioritized = False  # sampling follows priorities at all
    roer = False  # ROER's value loss (ROER-SAC) and EMA-blended priorities

    def priorities(
        self, td_error: torch.Tensor, fields: PrioritizedReplayFields
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(priority, weight)`` elementwise over ``td_error`` (weight: the rule's raw
        ROER weight, for logging; PER's is the priority)."""
        ones = torch.ones_like(td_error)
        return ones, ones

    def sampling_alpha(self, fields: PrioritizedReplayFields) -> float:
        """Exponent of the priority in the sampling probability."""
        return 1.0

    def importance_beta(self, fields: PrioritizedReplayFields) -> float:
        """Exponent of the importance weights ``(N P(i))^-beta``; 0: none."""
        return 0.0

    def ema_step(self, fields: PrioritizedReplayFields) -> float:
        """Step of the stored priority toward the new one; 1 replaces it."""
        return 1.0

    def value_loss(
        self, diff: torch.Tensor, *, temp: float, gumbel_max_clip: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ROER-SAC's per-sample value loss of ``diff = Q - V`` and its norm."""
        return squared_value_loss(diff), torch.ones((), device=diff.device)


class PERRule(PriorityRule):
    name = "PER"
    prioritized = True

    def priorities(self, td_error, fields):
        priority = per_priority(td_error)
        return priority, priority

    def sampling_alpha(self, fields):
        return fields.per_alpha

    def importance_beta(self, fields):
        return fields.per_importance_beta


class KLRule(PriorityRule):
    name = "KL"
    prioritized = True
    roer = True

    def priorities(self, td_error, fields):
        return kl_priority(
            td_error,
            temp=fields.temp,
            min_clip=fields.min_clip,
            max_clip=fields.max_clip,
            normalize=fields.std_normalize,
        )

    def ema_step(self, fields):
        return fields.per_beta

    def value_loss(self, diff, *, temp, gumbel_max_clip):
        return gumbel_value_loss(diff, temp=temp, gumbel_max_clip=gumbel_max_clip)


class JSRule(KLRule):
    name = "JS"

    def priorities(self, td_error, fields):
        return js_priority(
            td_error,
            temp=fields.temp,
            max_clip=fields.max_clip,
            js_min_weight=fields.js_min_weight,
            js_max_weight=fields.js_max_weight,
            normalize=fields.std_normalize,
        )

    def value_loss(self, diff, *, temp, gumbel_max_clip):
        return js_value_loss(diff, temp=temp, gumbel_max_clip=gumbel_max_clip)


PRIORITY_RULES: dict[str, PriorityRule] = {
    rule.name: rule for rule in (KLRule(), JSRule(), PERRule(), PriorityRule())
}
