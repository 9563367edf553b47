"""The recurrent value network of the central critic (rMAPPO's): a block's values step
by step equal its sequences' values run from the states it records, with resets at
episode starts."""

import numpy as np
import pytest
import torch
from torch import nn

from marllib_ext.policies.joint_critic import recurrent_value_net
from marllib_ext.policies.recurrent_critic import HIDDEN, RecurrentValueNet


def _net(rnn_type, in_dim=3, hidden=5):
    torch.manual_seed(0)
    return recurrent_value_net(in_dim, [8], "tanh", rnn_type, hidden)


def _reference(net, inputs, next_inputs, resets):
    """Slow reference: every world's steps one at a time from a zero state, afresh at
    a reset and at the block's first step; the next value from the state after the
    step."""
    horizon, worlds, _ = inputs.shape
    values = np.zeros((horizon, worlds))
    next_values = np.zeros((horizon, worlds))
    for b in range(worlds):
        state = None
        for t in range(horizon):
            if state is None or resets[t, b]:
                state = {k: v[None] for k, v in net.initial_state().items()}
            out, after = net._run(net.trunk(inputs[t, b][None, None]), state)
            values[t, b] = net.head(out)[0, 0, 0]
            next_out, _ = net._run(net.trunk(next_inputs[t, b][None, None]), after)
            next_values[t, b] = net.head(next_out)[0, 0, 0]
            state = after
    return values, next_values


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_block_values_equal_stepping_each_world(rnn_type):
    net = _net(rnn_type)
    rng = np.random.default_rng(0)
    inputs = torch.as_tensor(rng.normal(size=(7, 3, 3)), dtype=torch.float32)
    next_inputs = torch.as_tensor(rng.normal(size=(7, 3, 3)), dtype=torch.float32)
    resets = torch.as_tensor(rng.random((7, 3)) < 0.3)
    with torch.no_grad():
        values, next_values, entered = net.block_values(inputs, next_inputs, resets)
        expected, expected_next = _reference(net, inputs, next_inputs, resets.numpy())
    np.testing.assert_allclose(values.numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(next_values.numpy(), expected_next, atol=1e-6)
    assert set(entered) == ({HIDDEN} if rnn_type == "gru" else {HIDDEN, "c"})
    assert entered[HIDDEN].shape == (7, 3, 5)
    assert torch.all(entered[HIDDEN][0] == 0)  # the block's first step starts afresh
    assert torch.all(entered[HIDDEN][resets] == 0)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_sequences_from_the_entered_states_give_the_block_values(rnn_type):
    """Cut a world's steps anywhere: a sequence run from the state entered at its first
    step gives the block's values; a continuing episode's next value is the following
    step's value."""
    net = _net(rnn_type)
    rng = np.random.default_rng(1)
    inputs = torch.as_tensor(rng.normal(size=(9, 2, 3)), dtype=torch.float32)
    resets = torch.zeros(9, 2, dtype=torch.bool)
    resets[5, 1] = True
    with torch.no_grad():
        values, next_values, entered = net.block_values(inputs, inputs.roll(-1, 0), resets)
        for world, start, stop in [(0, 0, 4), (0, 4, 9), (1, 2, 5), (1, 5, 9)]:
            state = {k: v[start, world][None] for k, v in entered.items()}
            out = net.sequences(inputs[start:stop, world][None], state)[0]
            np.testing.assert_allclose(out.numpy(), values[start:stop, world].numpy(), atol=1e-6)
    np.testing.assert_allclose(next_values[:4, 0].numpy(), values[1:5, 0].numpy(), atol=1e-6)


def test_resets_everywhere_make_it_a_feed_forward_value():
    """Literal case: a GRU entered with h = 0 gives h' = (1 - z) * n, so with every
    step reset the value depends on the step's input only (two equal inputs at
    different steps give one value)."""
    net = _net("gru")
    x = torch.tensor([[[0.5, -1.0, 2.0]], [[0.1, 0.2, 0.3]], [[0.5, -1.0, 2.0]]])
    with torch.no_grad():
        values, _, _ = net.block_values(x, x, torch.ones(3, 1, dtype=torch.bool))
    assert float(values[0, 0]) == pytest.approx(float(values[2, 0]), abs=1e-7)
    assert float(values[0, 0]) != pytest.approx(float(values[1, 0]), abs=1e-4)


def test_unknown_rnn_type_is_refused():
    with pytest.raises(ValueError, match="rnn_type"):
        RecurrentValueNet(nn.Identity(), 3, "transformer", 4)
