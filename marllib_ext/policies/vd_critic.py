"""Learner-only value-decomposition critic: per-agent values mixed into V_tot."""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn

from marllib_ext.ops.mixers import qmix_mix, vdn_mix
from marllib_ext.policies.joint_critic import STATE, grid_value_net, mlp, recurrent_value_net

# Critic batch column: (rows, n_agents, max_obs_dim) each agent's own observation,
# zero-padded, agents in sorted id order.
AGENT_OBS = "agent_obs"
# (rows, n_agents) 1 where the agent is present at that step. An absent agent (dead,
# not yet arrived, waiting for its turn) enters the mixer with value 0: VDN sums the
# present agents; QMIX's hypernetworks see who is present in the state's alive mask.
AGENT_PRESENT = "agent_present"
MIXERS = ("vdn", "qmix")
AGENT_VALUE_SPREAD = "agent_value_spread"


class QMixHypernetworks(nn.Module):
    """State-conditioned weights of the QMIX mixer (Rashid et al., 2018).

    ``init_scale``: ``None`` keeps torch's default initialization (PyMARL's); a gain
    gives every layer an orthogonal weight of that gain and a zero bias (JaxMARL's
    ``MIXER_INIT_SCALE``, 0.01 on SMAX), which starts ``Q_tot`` near 0 on any state
    scale."""

    def __init__(
        self,
        state_dim: int,
        n_agents: int,
        embed_dim: int,
        hypernet_dim: int,
        init_scale: float | None = None,
    ) -> None:
        super().__init__()
        self.n_agents, self.embed_dim = n_agents, embed_dim
        self.w1 = nn.Sequential(
            nn.Linear(state_dim, hypernet_dim),
            nn.ReLU(),
            nn.Linear(hypernet_dim, n_agents * embed_dim),
        )
        self.b1 = nn.Linear(state_dim, embed_dim)
        self.w2 = nn.Sequential(
            nn.Linear(state_dim, hypernet_dim), nn.ReLU(), nn.Linear(hypernet_dim, embed_dim)
        )
        self.b2 = nn.Sequential(nn.Linear(state_dim, embed_dim), nn.ReLU(), nn.Linear(embed_dim, 1))
        if init_scale is not None:
            for layer in self.modules():
                if isinstance(layer, nn.Linear):
                    nn.init.orthogonal_(layer.weight, gain=init_scale)
                    nn.init.zeros_(layer.bias)

    def forward(self, agent_values: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        w1 = self.w1(state).view(-1, self.n_agents, self.embed_dim)
        return qmix_mix(
            agent_values, w1, self.b1(state), self.w2(state), self.b2(state).squeeze(-1)
        )


class ValueDecompositionCritic(TorchRLModule, ValueFunctionAPI):
    """``V_tot(s) = mixer(V_1(o_1), ..., V_n(o_n); s)`` (MARLlib's VD pipeline).

    One value head per actor policy (agents sharing a policy share a head), each on the
    agent's own observation; ``mixer`` is ``vdn`` (sum) or ``qmix`` (monotonic
    hypernetwork mixer on the global state). The value loss on ``V_tot`` reaches every
    head through the mixer.

    ``model_config``: ``head_of_agent`` (head key per agent, sorted agent order),
    ``obs_dims`` (per agent), ``state_dim``, ``hiddens``, ``activation``, ``mixer``,
    ``mixer_embed_dim``, ``hypernet_embed_dim``; ``rnn_type`` (``gru`` | ``lstm``;
    absent or None: feed-forward), ``rnn_hidden_dim``, ``max_seq_len``: recurrent heads
    (``policies.recurrent_critic``), each agent with its own state over the episode (an
    absent agent's head reads zeros), the batch then ``[N, L]`` sequences.
    ``agent_grids`` (``[H, W, C]`` per agent) and ``conv_filters`` (``encoder: cnn``):
    each head a CNN on its agent's flattened grid (``joint_critic.grid_value_net``).
    """

    @override(TorchRLModule)
    def setup(self) -> None:
        config = self.model_config
        self.mixer_name = config["mixer"]
        if self.mixer_name not in MIXERS:
            raise ValueError(f"mixer must be one of {MIXERS}, got {self.mixer_name!r}")
        self.head_of_agent = list(config["head_of_agent"])
        self.obs_dims = [int(d) for d in config["obs_dims"]]
        dim_of_head = {}
        for head, dim in zip(self.head_of_agent, self.obs_dims, strict=True):
            dim_of_head.setdefault(head, dim)
        self.rnn_type = config.get("rnn_type")
        hiddens, activation = list(config["hiddens"]), config["activation"]
        grids = config.get("agent_grids")
        if grids is not None:
            grid_of_head = dict(zip(self.head_of_agent, grids, strict=True))
            heads = {
                head: grid_value_net([1, *grid], config["conv_filters"], hiddens, activation)
                for head, grid in grid_of_head.items()
            }
        elif self.rnn_type is None:
            heads = {head: mlp(dim, hiddens, 1, activation) for head, dim in dim_of_head.items()}
        else:
            hidden = int(config["rnn_hidden_dim"])
            heads = {
                head: recurrent_value_net(dim, hiddens, activation, self.rnn_type, hidden)
                for head, dim in dim_of_head.items()
            }
        self.heads = nn.ModuleDict(heads)
        self.setup_head_groups()
        self.hypernetworks = (
            QMixHypernetworks(
                config["state_dim"],
                len(self.head_of_agent),
                config["mixer_embed_dim"],
                config["hypernet_embed_dim"],
            )
            if self.mixer_name == "qmix"
            else None
        )

    def setup_head_groups(self) -> None:
        """The agents each head serves at one input width, evaluated in one call
        (``head_groups``), and the order that puts the groups' columns back in agent
        order (``agent_order``)."""
        groups: dict[tuple[str, int], list[int]] = {}
        for i, (head, dim) in self._agents():
            groups.setdefault((head, dim), []).append(i)
        self.head_groups = [(head, dim, agents) for (head, dim), agents in groups.items()]
        grouped = [i for _, _, agents in self.head_groups for i in agents]
        self.register_buffer("agent_order", torch.argsort(torch.tensor(grouped)), persistent=False)

    @override(TorchRLModule)
    def get_initial_state(self) -> dict[str, torch.Tensor]:
        """A recurrent critic's state of one row: every agent's, ``(n_agents, hidden)``."""
        if self.rnn_type is None:
            return {}
        first = next(iter(self.heads.values())).initial_state()
        return {k: v.expand(len(self.head_of_agent), -1).clone() for k, v in first.items()}

    @override(TorchRLModule)
    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {}

    def _agents(self):
        return enumerate(zip(self.head_of_agent, self.obs_dims, strict=True))

    def agent_values(self, batch: dict[str, Any]) -> torch.Tensor:
        """``(rows, n_agents)`` per-agent values ``V_i(o_i)``; a recurrent critic's
        ``(N, L, n_agents)`` over its sequences, each agent from its state at the
        sequence's first step."""
        obs = batch[AGENT_OBS]
        if self.rnn_type is not None:
            state = batch[Columns.STATE_IN]
            return torch.stack(
                [
                    self.heads[head].sequences(
                        obs[:, :, i, :dim], {k: v[:, i] for k, v in state.items()}
                    )
                    for i, (head, dim) in self._agents()
                ],
                dim=-1,
            )
        rows = obs.shape[0]
        parts = [
            self.heads[head](obs[:, agents, :dim].reshape(rows * len(agents), dim)).reshape(
                rows, len(agents)
            )
            for head, dim, agents in self.head_groups
        ]
        return torch.cat(parts, dim=1).index_select(1, self.agent_order)

    def mix(self, agent_values: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        """``V_tot`` of ``(..., n_agents)`` values (absent agents count 0), ``(...)``."""
        if AGENT_PRESENT in batch:
            agent_values = agent_values * batch[AGENT_PRESENT]
        shape = agent_values.shape[:-1]
        flat = agent_values.reshape(-1, agent_values.shape[-1])
        if self.hypernetworks is None:
            return vdn_mix(flat).reshape(shape)
        state = batch[STATE]
        return self.hypernetworks(flat, state.reshape(-1, state.shape[-1])).reshape(shape)

    def block_values(self, inputs: dict[str, torch.Tensor], after: dict[str, torch.Tensor], resets):
        """A recurrent critic's ``(T, B)`` ``V_tot`` of a block's inputs and of the
        inputs after each step, and the state each agent entered each step with
        (``{key: (T, B, n_agents, hidden)}``): each agent's head over the block step by
        step (``RecurrentValueNet.block_values``), then the mixer."""
        values, next_values, entered = [], [], {}
        for i, (head, dim) in self._agents():
            v, next_v, state = self.heads[head].block_values(
                inputs[AGENT_OBS][:, :, i, :dim], after[AGENT_OBS][:, :, i, :dim], resets
            )
            values.append(v)
            next_values.append(next_v)
            for k, s in state.items():
                entered.setdefault(k, []).append(s)
        entered = {k: torch.stack(v, dim=2) for k, v in entered.items()}
        return (
            self.mix(torch.stack(values, -1), inputs),
            self.mix(torch.stack(next_values, -1), after),
            entered,
        )

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        """``V_tot`` (``vf_preds``, through forward_train so DDP syncs its gradients)
        and the per-agent values' spread (a detached diagnostic)."""
        agent_values = self.agent_values(batch)
        spread = (
            agent_values.detach().std(dim=1).mean()
            if agent_values.shape[1] > 1
            else torch.zeros((), device=agent_values.device)
        )
        return {Columns.VF_PREDS: self.mix(agent_values, batch), AGENT_VALUE_SPREAD: spread}

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self.mix(self.agent_values(batch), batch)
