"""Per-agent Q networks (acting on env runners) and the team's learner-only mixer.

``QAgentRLModule``: ``Q_i(o_i, .)`` over discrete actions, an MLP or PyMARL's GRU agent
(``fc -> GRUCell -> fc``). It acts epsilon-greedily with MARLlib's linear schedule over
global env steps (the ``t`` RLlib's env runner passes) and greedily at inference.

``JointQMixer``: learner-only; the team's mixer (``none`` for IQL, ``vdn``, ``qmix``)
and its target copy. Target copies of the agent networks are learner-only
``QAgentRLModule`` instances (``target_module_id``).
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn
from torch.func import functional_call

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY, plain_observation_space
from marllib_ext.ops.joint_q import epsilon_greedy, linear_schedule, random_legal_actions
from marllib_ext.ops.masks import masked_argmax
from marllib_ext.ops.mixers import vdn_mix
from marllib_ext.ops.sequences import unroll_segments
from marllib_ext.ops.td import merge_moments
from marllib_ext.policies.joint_critic import ACTIVATIONS, GridStackEncoder, mlp
from marllib_ext.policies.vd_critic import QMixHypernetworks

JOINT_Q_MIXERS = ("none", "vdn", "qmix")
HIDDEN = "h"
TARGET_PREFIX = "target_"
MIXER_MODULE_ID = "joint_q"
# One more unroll segment's fixed cost, in sequence-steps: at about 200, 128-episode
# batches of 3 GRU agents on SMAX 3m ran fastest (about 4 segments; 2-core CPU).
UNROLL_SEGMENT_COST = 200.0


def target_module_id(policy_id: str) -> str:
    """Module id of the target copy of an agent policy's Q network."""
    return f"{TARGET_PREFIX}{policy_id}"


class QAgentRLModule(TorchRLModule):
    """``Q_i(o_i, a)`` for every discrete action ``a``.

    ``model_config``: ``hiddens``, ``activation``, ``use_rnn`` (GRU agent with
    ``rnn_hidden_dim`` units), ``epsilon_start``, ``epsilon_end``,
    ``epsilon_timesteps``; ``grid`` ``[H, W, C]`` and ``conv_filters`` (``encoder: cnn``):
    conv layers on the observation's grid first (``joint_critic.GridStackEncoder``).
    With action masks it acts over the legal actions only."""

    handles_action_masks = True

    @override(TorchRLModule)
    def setup(self) -> None:
        config = self.model_config
        # Masked envs: {"observation", "action_mask"}; the network reads the observation.
        obs_dim = int(torch.tensor(plain_observation_space(self.observation_space).shape).prod())
        n_actions = int(self.action_space.n)
        self.use_rnn = bool(config.get("use_rnn", False))
        # encoder: cnn: conv layers on the agent's grid first, their features flattened.
        conv = (
            [GridStackEncoder([1, *config["grid"]], config["conv_filters"], config["activation"])]
            if config.get("grid")
            else []
        )
        in_dim = conv[0].out_dim if conv else obs_dim
        if self.use_rnn:
            hidden = int(config["rnn_hidden_dim"])
            self.encoder = nn.Sequential(
                *conv, nn.Linear(in_dim, hidden), ACTIVATIONS[config["activation"]]()
            )
            self.gru = nn.GRUCell(hidden, hidden)
            self.head = nn.Linear(hidden, n_actions)
            # Not a submodule: no second set of weights in the state dict (q_sequence).
            self.__dict__["sequence_gru"] = nn.GRU(hidden, hidden, batch_first=True)
        else:
            net = mlp(in_dim, list(config["hiddens"]), n_actions, config["activation"])
            self.net = nn.Sequential(*conv, net) if conv else net  # the MLP's keys unchanged

    @override(TorchRLModule)
    def get_initial_state(self) -> dict[str, torch.Tensor]:
        if not self.use_rnn:
            return {}
        return {HIDDEN: torch.zeros(int(self.model_config["rnn_hidden_dim"]))}

    def q_sequence(self, obs: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, L, d)`` observations of whole sequences -> ``(B, L, A)``; a GRU agent
        starts from its initial state at the first step.

        ``lengths (B,)``: each sequence's real steps; on the CPU a GRU agent then
        unrolls no step past them (``ops.sequences.unroll_segments``:
        the same values on the real steps, 0 or the padded unroll's values past them)."""
        if not self.use_rnn:
            return self.net(obs)
        if lengths is not None and obs.device.type == "cpu":
            return self._segmented_q_sequence(obs, lengths)
        return self._padded_q_sequence(obs)

    def _padded_q_sequence(self, obs: torch.Tensor) -> torch.Tensor:
        hidden, _ = self._unroll(self.encoder(obs), None)
        return self.head(hidden)

    def _unroll(self, inputs: torch.Tensor, state: torch.Tensor | None):
        """The cell's own weights in torch's fused GRU over ``(B, L, h)`` inputs from
        ``state (1, B, h)`` (zeros: ``None``): the same values and gradients as stepping
        the cell, about 1.8x faster (forward and backward, 2-core CPU); the helper holds
        no parameters of its own."""
        weights = {
            "weight_ih_l0": self.gru.weight_ih,
            "weight_hh_l0": self.gru.weight_hh,
            "bias_ih_l0": self.gru.bias_ih,
            "bias_hh_l0": self.gru.bias_hh,
        }
        args = (inputs,) if state is None else (inputs, state)
        return functional_call(self.sequence_gru, weights, args)

    def _segmented_q_sequence(self, obs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``q_sequence`` in time segments, each over the sequences still running
        (longest first). A replayed batch is padded to its longest episode: on SMAX 3m
        30-60% of its steps are real, and the CPU's cost is the padding's arithmetic."""
        batch, steps = obs.shape[:2]
        order = torch.argsort(lengths, descending=True, stable=True)
        segments = unroll_segments(lengths[order].numpy(), steps, UNROLL_SEGMENT_COST)
        if segments == [(0, steps, batch)]:  # every sequence runs to the end
            return self._padded_q_sequence(obs)
        ordered = obs[order]
        state, pieces, done = None, [], 0
        for start, stop, rows in segments:
            inputs = self.encoder(ordered[:rows, start:stop])
            hidden, state = self._unroll(inputs, None if state is None else state[:, :rows])
            pieces.append(nn.functional.pad(self.head(hidden), (0, 0, 0, 0, 0, batch - rows)))
            done = stop
        if done < steps:  # past the longest sequence
            pieces.append(obs.new_zeros(batch, steps - done, int(self.action_space.n)))
        return torch.cat(pieces, dim=1)[torch.argsort(order)]  # back to the input order

    def _step(self, batch: dict[str, Any]):
        """Q values of the env runner's batch, its action mask (``None`` without one,
        shaped like the values) and the next recurrent state."""
        obs, mask = batch[Columns.OBS], None
        if isinstance(obs, dict):
            obs, mask = obs[OBSERVATION_KEY], obs[ACTION_MASK_KEY]
        obs = obs.float()
        if not self.use_rnn:
            return self.net(obs), mask, {}
        # Stateful modules get a time rank of 1 on env runners: (B, 1, d).
        hidden = self.gru(self.encoder(obs[:, 0]), batch[Columns.STATE_IN][HIDDEN])
        q = self.head(hidden).unsqueeze(1)
        mask = None if mask is None else mask.reshape(q.shape)
        return q, mask, {Columns.STATE_OUT: {HIDDEN: hidden}}

    @override(TorchRLModule)
    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        q, mask, out = self._step(batch)
        return {**out, Columns.ACTIONS: masked_argmax(q, mask)}

    @override(TorchRLModule)
    def _forward_exploration(self, batch: dict[str, Any], t: int = 0, **kwargs) -> dict[str, Any]:
        q, mask, out = self._step(batch)
        flat = q.reshape(-1, q.shape[-1])
        flat_mask = torch.ones_like(flat) if mask is None else mask.reshape(flat.shape)
        epsilon = self.epsilon(t)
        draws = torch.rand(flat.shape[0], device=flat.device)
        random_actions = random_legal_actions(flat_mask)
        actions = epsilon_greedy(flat, epsilon, draws, random_actions, flat_mask)
        return {**out, Columns.ACTIONS: actions.reshape(q.shape[:-1])}

    def epsilon(self, t: int) -> float:
        config = self.model_config
        return linear_schedule(
            t, config["epsilon_start"], config["epsilon_end"], config["epsilon_timesteps"]
        )

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {}  # the joint-Q learner calls q_sequence on the team batch


class JointQMixer(TorchRLModule):
    """A team's mixer and its target: ``Q_tot = mixer(Q_1..Q_k; s)``.

    ``model_config``: ``mixer`` (``none`` | ``vdn`` | ``qmix``), ``n_agents`` (of the
    team), ``state_dim``, ``mixer_embed_dim``, ``hypernet_embed_dim``,
    ``mixer_init_scale`` (``QMixHypernetworks``' ``init_scale``) and
    ``state_normalize``: the hypernetworks then read the state standardized by running
    moments of every state the learner has trained on (buffers, kept in checkpoints).
    Why: a state on a scale of several units (LBF's grid coordinates and levels, up to
    7) puts ``Q_tot`` at 8-19 at initialization through ``b1(s)``, a bias the
    bootstrapped target removes only at ``1 - gamma`` per target copy.
    ``twin`` (FACMAC with ``twin_q``): a second pair of hypernetworks mixing the twin
    critics. ``reward_running_moments``: it also keeps the running mean and variance of
    every reward the learner trained on (EPyMARL's ``standardise_rewards``; buffers, in
    checkpoints)."""

    STATE_CLIP = 10.0  # standardized state bound, as RLlib's MeanStdFilter clips

    @override(TorchRLModule)
    def setup(self) -> None:
        config = self.model_config
        self.mixer_name = config["mixer"]
        if self.mixer_name not in JOINT_Q_MIXERS:
            raise ValueError(f"mixer must be one of {JOINT_Q_MIXERS}, got {self.mixer_name!r}")

        def hypernetworks() -> QMixHypernetworks:
            return QMixHypernetworks(
                config["state_dim"],
                config["n_agents"],
                config["mixer_embed_dim"],
                config["hypernet_embed_dim"],
                init_scale=config.get("mixer_init_scale"),
            )

        self.state_normalize = bool(config.get("state_normalize", False))
        dim = int(config["state_dim"])
        self.register_buffer("state_mean", torch.zeros(dim))
        self.register_buffer("state_var", torch.ones(dim))
        self.register_buffer("state_count", torch.zeros(()))
        self.reward_running_moments = bool(config.get("reward_running_moments", False))
        if self.reward_running_moments:  # registered only then: older checkpoints load
            self.register_buffer("reward_mean", torch.zeros(()))
            self.register_buffer("reward_var", torch.ones(()))
            self.register_buffer("reward_count", torch.zeros(()))
        self.hypernetworks = hypernetworks() if self.mixer_name == "qmix" else None
        self.target_hypernetworks = hypernetworks() if self.mixer_name == "qmix" else None
        twin = bool(config.get("twin", False)) and self.mixer_name == "qmix"
        self.twin_hypernetworks = hypernetworks() if twin else None
        self.target_twin_hypernetworks = hypernetworks() if twin else None
        for online, target in self._hypernetwork_pairs():
            target.load_state_dict(online.state_dict())
            target.requires_grad_(False)

    def _hypernetwork_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [
            (online, target)
            for online, target in (
                (self.hypernetworks, self.target_hypernetworks),
                (self.twin_hypernetworks, self.target_twin_hypernetworks),
            )
            if online is not None
        ]

    @override(TorchRLModule)
    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {}

    def mix(
        self,
        agent_values: torch.Tensor,
        state: torch.Tensor,
        *,
        target: bool = False,
        twin: bool = False,
    ):
        """``(B, L, k)`` chosen per-agent values and ``(B, L, s)`` states -> ``(B, L)``;
        ``twin`` mixes with the second hypernetworks (built with ``twin``)."""
        if self.mixer_name == "none":
            raise RuntimeError("IQL has no mixer: each agent keeps its own TD target")
        batch, length, k = agent_values.shape
        flat = agent_values.reshape(batch * length, k)
        if self.mixer_name == "vdn":
            return vdn_mix(flat).view(batch, length)
        if twin and self.twin_hypernetworks is None:
            raise RuntimeError("this mixer was built without twin hypernetworks")
        online, target_hyper = self._hypernetwork_pairs()[1 if twin else 0]
        hyper = target_hyper if target else online
        return hyper(flat, self.mixer_input(state.reshape(batch * length, -1))).view(batch, length)

    def mixer_input(self, state: torch.Tensor) -> torch.Tensor:
        """The state as the hypernetworks read it (standardized with ``state_normalize``)."""
        if not self.state_normalize:
            return state
        return ((state - self.state_mean) / torch.sqrt(self.state_var + 1e-8)).clamp(
            -self.STATE_CLIP, self.STATE_CLIP
        )

    @torch.no_grad()
    def observe_states(self, states: torch.Tensor) -> None:
        """Adds ``states (N, s)`` to the running moments (``state_normalize`` only)."""
        if not self.state_normalize or self.mixer_name != "qmix":
            return
        mean, var, count = merge_moments(
            self.state_mean, self.state_var, float(self.state_count), states.float()
        )
        self.state_mean.copy_(mean)
        self.state_var.copy_(var)
        self.state_count.fill_(count)

    @torch.no_grad()
    def observe_rewards(self, rewards: torch.Tensor) -> None:
        """Adds the rewards ``(N,)`` of the real steps to the running reward moments."""
        if not self.reward_running_moments:
            raise RuntimeError("this mixer was built without reward_running_moments")
        mean, var, count = merge_moments(
            self.reward_mean.view(1),
            self.reward_var.view(1),
            float(self.reward_count),
            rewards.float().reshape(-1, 1),
        )
        self.reward_mean.copy_(mean[0])
        self.reward_var.copy_(var[0])
        self.reward_count.fill_(count)

    def sync_target(self, tau: float = 1.0) -> None:
        """``target <- tau * online + (1 - tau) * target`` (``tau = 1``: hard copy)."""
        for online, target in self._hypernetwork_pairs():
            polyak_update(target, online, tau)


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``theta_target <- tau * theta + (1 - tau) * theta_target`` for every parameter."""
    for target_param, param in zip(target.parameters(), online.parameters(), strict=True):
        target_param.mul_(1.0 - tau).add_(param, alpha=tau)
