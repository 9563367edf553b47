"""Settings of the novelty signals: how observations are counted (``CountFields``, for
EFX's ``intrinsic_reward: count`` and the bonus) and a novelty bonus added to the team
reward (``NoveltyBonusFields``, ``mappo``'s ``intrinsic_bonus_coeff``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from marllib_ext.algos.config import CentralCriticSettings, Check
from marllib_ext.ops.novelty import BONUS_SIGNALS, COUNT_HASHES, COUNT_SCOPES


@dataclass(frozen=True)
class CountFields:
    """How the count signal (``intrinsic_signals.CountSignal``) counts observations:
    the agent's own or the team's joint one (``count_scope``), as exact rounded rows
    (``count_hash: exact``, ``count_decimals``) or SimHash codes (``simhash``,
    ``count_hash_bits``)."""

    count_scope: str = dataclasses.field(default="agent", kw_only=True)
    count_hash: str = dataclasses.field(default="exact", kw_only=True)
    count_hash_bits: int = dataclasses.field(default=32, kw_only=True)
    count_decimals: int = dataclasses.field(default=2, kw_only=True)

    def checks(self) -> list[Check]:
        return [
            (self.count_scope in COUNT_SCOPES, "count_scope", f"one of {COUNT_SCOPES}"),
            (self.count_hash in COUNT_HASHES, "count_hash", f"one of {COUNT_HASHES}"),
            (1 <= self.count_hash_bits <= 64, "count_hash_bits", "must be in [1, 64]"),
            (0 <= self.count_decimals <= 8, "count_decimals", "must be in [0, 8]"),
        ]


@dataclass(frozen=True)
class NoveltyBonusFields(CountFields):
    """A novelty bonus simply added to the team reward, ``r + intrinsic_bonus_coeff *
    r_int`` (0: off): the non-conservative counterpart of EFX's budget."""

    intrinsic_bonus_coeff: float = dataclasses.field(default=0.0, kw_only=True)
    intrinsic_bonus: str = dataclasses.field(default="count", kw_only=True)

    def checks(self) -> list[Check]:
        return [
            (self.intrinsic_bonus_coeff >= 0, "intrinsic_bonus_coeff", "must be >= 0"),
            (self.intrinsic_bonus in BONUS_SIGNALS, "intrinsic_bonus", f"one of {BONUS_SIGNALS}"),
        ]


@dataclass(frozen=True)
class MAPPOSettings(CentralCriticSettings, NoveltyBonusFields):
    """``mappo``: the joint-critic settings and an optional novelty bonus."""
