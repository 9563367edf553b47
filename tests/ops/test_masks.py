"""The masked distribution's math against hand-computed cases and slow references."""

import math

import pytest
import torch
from ray.rllib.models.torch.torch_distributions import TorchCategorical

from marllib_ext.ops.joint_q import double_q_next_values, epsilon_greedy, random_legal_actions
from marllib_ext.ops.masks import (
    MASKED_LOGIT,
    check_nonempty,
    masked_argmax,
    masked_entropy,
    masked_logits,
)

LOGITS = torch.tensor([[1.0, 2.0, 3.0, 0.0]])
MASK = torch.tensor([[1.0, 0.0, 1.0, 0.0]])


def test_illegal_logits_are_replaced_and_get_no_gradient():
    logits = LOGITS.clone().requires_grad_(True)
    out = masked_logits(logits, MASK)
    assert out.tolist() == [[1.0, MASKED_LOGIT, 3.0, MASKED_LOGIT]]
    torch.log_softmax(out, -1)[0, 2].backward()
    assert logits.grad[0, 1] == 0 and logits.grad[0, 3] == 0 and logits.grad[0, 0] != 0


def test_masked_entropy_by_hand():
    # Legal logits (1, 3): p = (1, e^2) / (1 + e^2), H = log(1 + e^2) - 2 e^2 / (1 + e^2).
    e2 = math.exp(2.0)
    expected = math.log(1 + e2) - 2 * e2 / (1 + e2)
    assert masked_entropy(LOGITS, MASK).item() == pytest.approx(expected, rel=1e-6)
    # RLlib's categorical on the masked logits gives the same entropy.
    dist = TorchCategorical(logits=masked_logits(LOGITS, MASK))
    assert dist.entropy().item() == pytest.approx(expected, rel=1e-6)


def test_log_probs_and_kl_are_those_of_the_legal_actions_and_finite():
    other = torch.tensor([[0.5, -4.0, 1.0, 9.0]])
    p = TorchCategorical(logits=masked_logits(LOGITS, MASK))
    q = TorchCategorical(logits=masked_logits(other, MASK))
    # Slow reference: the two-action distributions over the legal actions (0, 2).
    p_legal = torch.softmax(torch.tensor([1.0, 3.0]), -1)
    q_legal = torch.softmax(torch.tensor([0.5, 1.0]), -1)
    expected_kl = float((p_legal * (p_legal / q_legal).log()).sum())
    assert p.kl(q).item() == pytest.approx(expected_kl, rel=1e-5)
    assert torch.isfinite(p.logp(torch.arange(4))).all()  # illegal ones: about -1e9
    assert p.logp(torch.tensor([2])).item() == pytest.approx(float(p_legal[1].log()), rel=1e-6)
    # The PPO ratio of a legal action under two masked policies is finite and exact.
    ratio = torch.exp(p.logp(torch.tensor([0])) - q.logp(torch.tensor([0])))
    assert ratio.item() == pytest.approx(float(p_legal[0] / q_legal[0]), rel=1e-5)


def test_no_illegal_action_in_100k_draws():
    torch.manual_seed(0)
    logits = torch.randn(1000, 6) * 5
    logits[:, 3] = 50.0  # the most likely action is illegal everywhere
    mask = (torch.rand(1000, 6) < 0.4).float()
    mask[torch.arange(1000), torch.randint(0, 6, (1000,))] = 1.0
    mask[:, 3] = 0.0
    mask[mask.sum(-1) == 0, 0] = 1.0
    dist = TorchCategorical(logits=masked_logits(logits, mask))
    draws = torch.stack([dist.sample() for _ in range(100)])  # 10^5 draws
    assert mask.gather(1, draws.T).min() == 1.0
    legal = random_legal_actions(mask.repeat(100, 1))
    assert mask.repeat(100, 1).gather(1, legal[:, None]).min() == 1.0


def test_greedy_and_double_q_targets_ignore_illegal_actions_with_the_largest_q():
    online = torch.tensor([[5.0, 1.0, 9.0], [0.0, 2.0, 1.0]])
    target = torch.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    next_mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    assert masked_argmax(online, next_mask).tolist() == [0, 2]
    assert double_q_next_values(online, target, next_mask).tolist() == [10.0, 60.0]
    assert double_q_next_values(online, target).tolist() == [30.0, 50.0]  # unmasked
    no_explore = epsilon_greedy(online, 0.0, torch.ones(2), torch.zeros(2), next_mask)
    assert no_explore.tolist() == [0, 2]


def test_an_empty_mask_row_is_named():
    mask = torch.ones(3, 4)
    mask[2] = 0
    with pytest.raises(ValueError, match=r"row \(2,\) has no legal action"):
        check_nonempty(mask)
    with pytest.raises(ValueError, match="one shape"):
        masked_logits(torch.zeros(2, 3), torch.ones(2, 4))
