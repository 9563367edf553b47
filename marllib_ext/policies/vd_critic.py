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
from marllib_ext.policies.joint_critic import STATE, mlp

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
    ``mixer_embed_dim``, ``hypernet_embed_dim``.
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
        self.heads = nn.ModuleDict(
            {
                head: mlp(dim, list(config["hiddens"]), 1, config["activation"])
                for head, dim in dim_of_head.items()
            }
        )
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

    @override(TorchRLModule)
    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {}

    def agent_values(self, batch: dict[str, Any]) -> torch.Tensor:
        """``(rows, n_agents)`` per-agent values ``V_i(o_i)``."""
        obs = batch[AGENT_OBS]
        return torch.stack(
            [
                self.heads[head](obs[:, i, :dim]).squeeze(-1)
                for i, (head, dim) in enumerate(zip(self.head_of_agent, self.obs_dims, strict=True))
            ],
            dim=1,
        )

    def mix(self, agent_values: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        if AGENT_PRESENT in batch:
            agent_values = agent_values * batch[AGENT_PRESENT]
        if self.hypernetworks is None:
            return vdn_mix(agent_values)
        return self.hypernetworks(agent_values, batch[STATE])

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
