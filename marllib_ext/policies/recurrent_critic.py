"""A recurrent value network for the central critic (rMAPPO's critic, Yu et al. 2022):
an MLP on the critic's input, one GRU or LSTM layer, a linear value head.

Two ways to run it, which give the same values:
- ``block_values``: a whole ``(T, B)`` rollout block, step by step, the state reset to
  zero where a world's episode starts (and at the block's first step: the critic lives
  on the learner, so nothing carries its state between blocks); it also returns the
  state each step was entered with;
- ``sequences``: ``(N, L)`` sequences, each from the state recorded at its first step
  (the learner's minibatches).
"""

from __future__ import annotations

import torch
from torch import nn

HIDDEN = "h"
CELL = "c"
RNN_TYPES = ("gru", "lstm")


class RecurrentValueNet(nn.Module):
    """``trunk`` (the MLP's hidden layers) -> ``rnn`` (``hidden`` units) -> ``head``.

    The state is a dict of ``(batch, hidden)`` tensors: ``{"h"}`` (GRU) or
    ``{"h", "c"}`` (LSTM)."""

    def __init__(self, trunk: nn.Module, trunk_dim: int, rnn_type: str, hidden: int) -> None:
        super().__init__()
        if rnn_type not in RNN_TYPES:
            raise ValueError(f"rnn_type must be one of {RNN_TYPES}, got {rnn_type!r}")
        self.trunk = trunk
        self.rnn_type = rnn_type
        self.hidden = int(hidden)
        layer = nn.GRU if rnn_type == "gru" else nn.LSTM
        self.rnn = layer(trunk_dim, self.hidden, batch_first=True)
        self.head = nn.Linear(self.hidden, 1)

    def initial_state(self) -> dict[str, torch.Tensor]:
        """The state of one row before its first step (zeros, no batch rank)."""
        zeros = torch.zeros(self.hidden)
        return {HIDDEN: zeros} if self.rnn_type == "gru" else {HIDDEN: zeros, CELL: zeros.clone()}

    def _run(self, features: torch.Tensor, state: dict[str, torch.Tensor]):
        """``features (N, L, d)`` from ``state`` -> outputs ``(N, L, hidden)`` and the
        state after the last position."""
        h = state[HIDDEN].unsqueeze(0).contiguous()
        if self.rnn_type == "gru":
            out, h = self.rnn(features, h)
            return out, {HIDDEN: h[0]}
        out, (h, c) = self.rnn(features, (h, state[CELL].unsqueeze(0).contiguous()))
        return out, {HIDDEN: h[0], CELL: c[0]}

    def sequences(self, inputs: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """``inputs (N, L, d)``, each sequence from ``state`` (``(N, hidden)`` each)
        -> values ``(N, L)``."""
        out, _ = self._run(self.trunk(inputs), state)
        return self.head(out).squeeze(-1)

    def block_values(
        self, inputs: torch.Tensor, next_inputs: torch.Tensor, resets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Values of a ``(T, B)`` block, step by step.

        With ``h_t`` the state entered at step ``t`` (zero where ``resets[t]`` or
        ``t = 0``, else the state after step ``t - 1``):
        ``V_t = head(rnn(x_t, h_t))`` and ``V'_t = head(rnn(x'_t, rnn_state(x_t, h_t)))``,
        the value of the input after step ``t`` (``next_inputs``) carried on from step
        ``t``'s state, so that ``V'_t = V_{t+1}`` where the episode goes on.

        Args:
            inputs, next_inputs: ``(T, B, d)`` the inputs acted on and after each step.
            resets: ``(T, B)`` bool, the world's episode starts at step ``t``.

        Returns:
            ``values``, ``next_values``: ``(T, B)``; ``entered``: the state entered at
            each step, ``{key: (T, B, hidden)}``.
        """
        horizon, worlds = resets.shape
        features = self.trunk(inputs)
        next_features = self.trunk(next_inputs)
        initial = {
            k: v.to(inputs.device).expand(worlds, -1) for k, v in self.initial_state().items()
        }
        state = initial
        values, next_values = [], []
        entered = {k: [] for k in initial}
        for t in range(horizon):
            fresh = resets[t].reshape(-1, 1) | (t == 0)
            state = {k: torch.where(fresh, initial[k], v) for k, v in state.items()}
            for k, v in state.items():
                entered[k].append(v)
            out, after = self._run(features[t].unsqueeze(1), state)
            next_out, _ = self._run(next_features[t].unsqueeze(1), after)
            values.append(out[:, 0])
            next_values.append(next_out[:, 0])
            state = after
        return (
            self.head(torch.stack(values)).squeeze(-1),
            self.head(torch.stack(next_values)).squeeze(-1),
            {k: torch.stack(v) for k, v in entered.items()},
        )
