"""Joint Q-learning on RLlib's new stack: ``iql``, ``vdn``, ``qmix`` (MARLlib / PyMARL).

Env runners act with one ``QAgentRLModule`` per policy of the sharing mode
(epsilon-greedy on MARLlib's schedule); ``TeamReplayAlgorithm`` stores and replays
team episodes (``algos/team_replay.py``); ``JointQLearner.compute_losses`` runs every
agent's online and target Q network on the replayed batch, mixes per team and takes the
joint double-Q TD loss (``ops.joint_q``). Target networks: a hard copy every
``target_network_update_freq`` sampled episodes (MARLlib), or Polyak averaging with
``tau`` after every update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from marllib_ext.algos.config import ACTIVATION_NAMES, Check
from marllib_ext.algos.policy_sharing import policy_mapping
from marllib_ext.algos.team_replay import (
    EPISODES_SAMPLED,
    LAYOUT_KEY,
    TD_ERRORS,
    TeamReplayAlgorithm,
    TeamReplaySettings,
    mixer_specs,
    team_module_ids,
    team_replay_config,
)
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.ops.joint_q import (
    chosen_action_values,
    double_q_next_values,
    linear_schedule,
    masked_td_loss,
    standardized_rewards,
    td_targets,
    team_sum,
)
from marllib_ext.policies.q_agent import (
    JOINT_Q_MIXERS,
    MIXER_MODULE_ID,
    JointQMixer,
    QAgentRLModule,
    polyak_update,
    target_module_id,
)
from marllib_ext.rllib_compat import learner_value, settings_of

OPTIMIZERS = ("rmsprop", "adam")


@dataclass(frozen=True)
class JointQSettings(TeamReplaySettings):
    """MARLlib's joint-Q hyperparameters (``iql.yaml``, ``vdn.yaml``, ``qmix.yaml``)."""

    mixer: str
    lr: float
    optimizer: str
    target_network_update_freq: int
    tau: float | None
    initial_epsilon: float
    final_epsilon: float
    epsilon_timesteps: int
    reward_standardize: bool
    use_rnn: bool
    rnn_hidden_dim: int
    hiddens: list[int]
    activation: str
    mixer_embed_dim: int
    hypernet_embed_dim: int
    state_normalize: bool
    grad_clip: float | None

    def checks(self) -> list[Check]:
        return [
            (self.mixer in JOINT_Q_MIXERS, "mixer", f"one of {JOINT_Q_MIXERS}"),
            (self.lr > 0, "lr", "must be > 0"),
            (self.optimizer in OPTIMIZERS, "optimizer", f"one of {OPTIMIZERS}"),
            (self.target_network_update_freq > 0, "target_network_update_freq", "must be > 0"),
            (self.tau is None or 0 < self.tau <= 1, "tau", "null (hard updates) or in (0, 1]"),
            (
                0 <= self.final_epsilon <= self.initial_epsilon <= 1,
                "final_epsilon",
                "need 0 <= final_epsilon <= initial_epsilon <= 1",
            ),
            (self.epsilon_timesteps >= 0, "epsilon_timesteps", "must be >= 0"),
            (self.rnn_hidden_dim > 0, "rnn_hidden_dim", "must be > 0"),
            (self.activation in ACTIVATION_NAMES, "activation", f"one of {ACTIVATION_NAMES}"),
        ]

    def exploration_at(self, env_steps: int) -> float:
        return linear_schedule(
            env_steps, self.initial_epsilon, self.final_epsilon, self.epsilon_timesteps
        )


# ---- learner ------------------------------------------------------------------------------
@dataclass(frozen=True)
class TeamPlan:
    """Which agents (indices into the sorted agent list) a mixer module serves."""

    module_id: str
    agent_index: list[int]


class JointQLearner(TorchLearner):
    """One TD loss over every agent network and the team mixers (see module docstring).

    Every team's mixer module gets the same batch; the agent and target networks are
    read from ``self.module`` by policy id."""

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        self.settings: JointQSettings = settings_of(self.config)
        layout = learner_value(self.config, LAYOUT_KEY)
        self.agents: tuple[str, ...] = tuple(layout["agents"])
        self.policy_of: dict[str, str] = dict(layout["policy_of"])
        self.obs_dim_of: dict[str, int] = dict(layout["obs_dim_of"])
        self.teams = [TeamPlan(mid, list(index)) for mid, index in layout["teams"].items()]
        self.last_target_sync = 0
        for policy in set(self.policy_of.values()):
            self._target(policy).load_state_dict(self.module[policy].state_dict())
            self._target(policy).requires_grad_(False)

    def _target(self, policy: str) -> QAgentRLModule:
        return self.module[target_module_id(policy)]

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        params = [p for p in self.get_parameters(self.module[module_id]) if p.requires_grad]
        if module_id.startswith("target_") or not params:
            return
        settings = settings_of(self.config)
        if settings.optimizer == "rmsprop":  # PyMARL's RMSprop settings
            optimizer = torch.optim.RMSprop(params, lr=settings.lr, alpha=0.99, eps=1e-5)
        else:
            optimizer = torch.optim.Adam(params, lr=settings.lr)
        self.register_optimizer(
            module_id=module_id, optimizer=optimizer, params=params, lr_or_lr_schedule=settings.lr
        )

    def agent_q_values(self, obs: torch.Tensor, *, target: bool) -> torch.Tensor:
        """``(B, L + 1, n, d)`` observations -> ``(B, L + 1, n, A)`` per-agent values."""
        values = []
        for index, agent in enumerate(self.agents):
            policy = self.policy_of[agent]
            network = self._target(policy) if target else self.module[policy]
            values.append(network.q_sequence(obs[:, :, index, : self.obs_dim_of[agent]]))
        return torch.stack(values, dim=2)

    @override(TorchLearner)
    def compute_losses(self, *, fwd_out, batch) -> dict[str, Any]:
        settings = self.settings
        columns = batch[self.teams[0].module_id]
        obs, state, mask = columns["obs"], columns["state"], columns["mask"]
        rewards = columns["rewards"]
        if settings.reward_standardize:
            rewards = standardized_rewards(rewards, mask)
        length = mask.shape[1]

        q = self.agent_q_values(obs, target=False)  # (B, L + 1, n, A)
        with torch.no_grad():
            next_values = double_q_next_values(
                q[:, 1:].detach(), self.agent_q_values(obs, target=True)[:, 1:]
            )  # (B, L, n)
        chosen = chosen_action_values(q[:, :length], columns["actions"])  # (B, L, n)

        losses, td_errors = {}, []
        for team in self.teams:
            mixer: JointQMixer = self.module[team.module_id]
            index = team.agent_index
            if mixer.mixer_name == "none":  # IQL: every agent its own target
                values = chosen[..., index]
                targets = td_targets(
                    rewards[..., index],
                    columns["terminated"].unsqueeze(-1),
                    next_values[..., index],
                    settings.gamma,
                )
                td_errors.append((targets - values).detach())
            else:
                mixer.observe_states(state[:, :length][mask.bool()])
                values = mixer.mix(chosen[..., index], state[:, :length])
                with torch.no_grad():
                    next_total = mixer.mix(next_values[..., index], state[:, 1:], target=True)
                targets = td_targets(
                    team_sum(rewards, index), columns["terminated"], next_total, settings.gamma
                )
                td_errors.append((targets - values).detach().unsqueeze(-1))
            loss = masked_td_loss(values, targets, mask, columns["weights"])
            losses[team.module_id] = loss
            valid = mask.bool()
            self.metrics.log_dict(
                {
                    "td_error_abs": td_errors[-1].abs().mean(-1)[valid].mean(),
                    "q_mean": (values if values.dim() == 2 else values.sum(-1))[valid].mean(),
                    "target_mean": (targets if targets.dim() == 2 else targets.sum(-1))[
                        valid
                    ].mean(),
                    "td_loss": loss.detach(),
                },
                key=team.module_id,
                window=1,
            )
        all_td = torch.cat(td_errors, dim=-1).cpu().numpy()
        self.metrics.delete(self.teams[0].module_id, TD_ERRORS, key_error=False)
        self.metrics.log_value(
            key=(self.teams[0].module_id, TD_ERRORS), value=all_td, reduce="item_series"
        )
        return losses

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        raise NotImplementedError("the joint TD loss spans modules: see compute_losses")

    @override(TorchLearner)
    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        settings = self.settings
        if settings.tau is not None:
            self.sync_targets(settings.tau)
            return
        episodes = int(timesteps.get(EPISODES_SAMPLED, 0))
        if episodes - self.last_target_sync >= settings.target_network_update_freq:
            self.sync_targets(1.0)
            self.last_target_sync = episodes

    def sync_targets(self, tau: float) -> None:
        for policy in set(self.policy_of.values()):
            polyak_update(self._target(policy), self.module[policy], tau)
        for team in self.teams:
            self.module[team.module_id].sync_target(tau)


# ---- algorithm ----------------------------------------------------------------------------
class JointQConfig(AlgorithmConfig):
    """RLlib config whose algorithm is ``TeamReplayAlgorithm`` and learner
    ``JointQLearner``."""

    def __init__(self, algo_class=None) -> None:
        super().__init__(algo_class=algo_class or TeamReplayAlgorithm)

    @override(AlgorithmConfig)
    def get_default_learner_class(self):
        return JointQLearner

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        # Every module comes from the builder's MultiRLModuleSpec; this is the class
        # RLlib fills spaces into.
        return RLModuleSpec(module_class=QAgentRLModule)


# ---- builders -----------------------------------------------------------------------------
def _check_discrete(env: EnvHandle, algo: str) -> None:
    for agent in env.layout.agents:
        space = env.layout.action_spaces[agent]
        if not isinstance(space, gym.spaces.Discrete):
            raise ConfigError(
                f"{algo} needs discrete actions, and agent {agent!r} of env {env.name!r} has "
                f"{space}; for continuous actions use iddpg, maddpg or facmac"
            )
        if not isinstance(env.layout.observation_spaces[agent], gym.spaces.Box):
            raise ConfigError(
                f"{algo} needs Box observations; agent {agent!r} of env {env.name!r} has "
                f"{env.layout.observation_spaces[agent]}"
            )


def build_joint_q(
    settings: JointQSettings, env: EnvHandle, share_policy: str, seed: int | None, *, algo: str
) -> JointQConfig:
    """The RLlib config of ``iql`` / ``vdn`` / ``qmix`` (``settings.mixer``)."""
    _check_discrete(env, algo)
    layout = env.layout
    mapping = policy_mapping(env, share_policy)
    agent_model = {
        "hiddens": list(settings.hiddens),
        "activation": settings.activation,
        "use_rnn": settings.use_rnn,
        "rnn_hidden_dim": settings.rnn_hidden_dim,
        "epsilon_start": settings.initial_epsilon,
        "epsilon_end": settings.final_epsilon,
        "epsilon_timesteps": settings.epsilon_timesteps,
    }
    specs: dict[str, RLModuleSpec] = {}
    for policy in sorted(set(mapping.values())):
        first = next(a for a in sorted(layout.agents) if mapping[a] == policy)
        spaces = {
            "observation_space": layout.observation_spaces[first],
            "action_space": layout.action_spaces[first],
        }
        specs[policy] = RLModuleSpec(
            module_class=QAgentRLModule, model_config=agent_model, **spaces
        )
        specs[target_module_id(policy)] = RLModuleSpec(
            module_class=QAgentRLModule, model_config=agent_model, learner_only=True, **spaces
        )
    team_ids = team_module_ids(env, MIXER_MODULE_ID)
    specs.update(
        mixer_specs(
            env,
            team_ids,
            settings.mixer,
            settings.mixer_embed_dim,
            settings.hypernet_embed_dim,
            state_normalize=settings.state_normalize,
        )
    )
    config = JointQConfig().training(
        gamma=settings.gamma,
        lr=settings.lr,
        grad_clip=settings.grad_clip,
        grad_clip_by="global_norm",
    )
    return team_replay_config(config, settings, env, mapping, specs, team_ids, seed)


def build_iql(settings, env, share_policy, seed):
    return build_joint_q(settings, env, share_policy, seed, algo="iql")


def build_vdn(settings, env, share_policy, seed):
    return build_joint_q(settings, env, share_policy, seed, algo="vdn")


def build_qmix(settings, env, share_policy, seed):
    return build_joint_q(settings, env, share_policy, seed, algo="qmix")
