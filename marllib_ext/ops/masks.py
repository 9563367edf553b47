"""Action masks and agents present: the masked distribution's math, pure torch.

Convention (PettingZoo): ``mask[..., a]`` is 1 where action ``a`` is legal, 0 where
not. An illegal action's logit is replaced by ``MASKED_LOGIT``, a large finite negative
number, never ``-inf``: its probability is exactly 0 in float32 (``exp(-1e9)``
underflows), while ``p * log p`` stays ``0 * (-1e9) = 0`` instead of ``0 * -inf = NaN``.
So log-probabilities, entropies, KLs and the PPO ratio computed by the usual
categorical formulas on masked logits are those of the distribution restricted to the
legal actions.
"""

from __future__ import annotations

import torch

MASKED_LOGIT = -1.0e9


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``sum(values * mask) / max(1, sum(mask))``: the mean over the rows that count
    (``values`` and ``mask`` of one shape; no row gives 0)."""
    mask = mask.float()
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def masked_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``logits (..., A)`` with ``MASKED_LOGIT`` where ``mask (..., A)`` is 0.

    ``logit'_a = logit_a`` if ``mask_a`` else ``MASKED_LOGIT``; the gradient of an
    illegal logit is 0."""
    if logits.shape != mask.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and action mask {tuple(mask.shape)} must have one shape"
        )
    return torch.where(mask.bool(), logits, torch.full_like(logits, MASKED_LOGIT))


def masked_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``H = -sum_{a legal} p_a log p_a`` with ``p = softmax`` over the legal actions.

    ``logits, mask (..., A)`` -> ``(...)``."""
    log_p = torch.log_softmax(masked_logits(logits, mask), dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


def masked_argmax(q: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``argmax_{a legal} q_a``: ``q, mask (..., A)`` -> ``(...)`` int64 (QMIX's
    ``avail_actions``); no mask means every action is legal."""
    if mask is None:
        return q.argmax(dim=-1)
    return masked_logits(q, mask).argmax(dim=-1)


def legal_action_counts(mask: torch.Tensor) -> torch.Tensor:
    """``|legal|``: ``mask (..., A)`` -> ``(...)`` float."""
    return mask.float().sum(dim=-1)


def check_nonempty(mask: torch.Tensor) -> None:
    """Raises ``ValueError`` if a row of ``mask (..., A)`` has no legal action."""
    empty = legal_action_counts(mask) == 0
    if bool(empty.any()):
        index = tuple(int(i) for i in torch.nonzero(empty)[0])
        raise ValueError(f"action mask row {index} has no legal action (all zeros)")
