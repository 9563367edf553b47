"""Deterministic actor-critics on replayed team episodes: ``iddpg``, ``maddpg``,
``facmac`` (MARLlib's DDPG family).

Env runners act with one ``DeterministicActorRLModule`` per policy (Gaussian noise);
``TeamReplayAlgorithm`` stores and replays team transitions; ``DDPGFamilyLearner``
takes, per team, the critic TD loss and the actors' deterministic policy loss in one
backward pass (the critics held fixed in the actor term), then Polyak-averages every
target (``ops/ddpg.py`` has the equations):

- ``iddpg``: a critic per policy on ``(o_i, a_i)``, each agent its own reward;
- ``maddpg``: a central critic per policy on ``(s, a_1..a_n)`` of the team, the team
  reward; actor i is updated through its own action, the others' from the batch;
- ``facmac``: per-agent critics ``Q_i(o_i, a_i)`` mixed into ``Q_tot`` by the QMIX
  mixer (or VDN) on the state; every actor is updated through the mixed critic with
  all current actions.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from marllib_ext.algos.config import ACTIVATION_NAMES, Check
from marllib_ext.algos.policy_sharing import policy_mapping
from marllib_ext.algos.team_replay import (
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
from marllib_ext.ops.ddpg import (
    deterministic_policy_loss,
    joint_actions_with_own,
    smoothed_target_actions,
)
from marllib_ext.ops.joint_q import masked_td_loss, standardized_rewards, td_targets, team_sum
from marllib_ext.policies.ddpg import DDPGCritic, DeterministicActorRLModule, critic_module_id
from marllib_ext.policies.q_agent import JointQMixer, polyak_update, target_module_id
from marllib_ext.rllib_compat import learner_value, settings_of

CRITIC_MODES = ("local", "central", "mixed")  # iddpg, maddpg, facmac
TEAM_MODULE = "ddpg_team"


@dataclass(frozen=True)
class DDPGSettings(TeamReplaySettings):
    """MARLlib's ``iddpg.yaml`` / ``maddpg.yaml`` / ``facmac.yaml`` plus network sizes."""

    critic_mode: str
    mixer: str
    actor_lr: float
    critic_lr: float
    tau: float
    exploration_noise: float
    actor_hiddens: list[int]
    critic_hiddens: list[int]
    activation: str
    mixer_embed_dim: int
    hypernet_embed_dim: int
    state_normalize: bool
    grad_clip: float | None
    reward_standardize: bool
    twin_q: bool
    smooth_target_policy: bool
    target_noise: float
    target_noise_clip: float

    def checks(self) -> list[Check]:
        return [
            (self.critic_mode in CRITIC_MODES, "critic_mode", f"one of {CRITIC_MODES}"),
            (
                self.mixer in ("vdn", "qmix") or self.critic_mode != "mixed",
                "mixer",
                "facmac mixes with vdn or qmix",
            ),
            (self.actor_lr > 0, "actor_lr", "must be > 0"),
            (self.critic_lr > 0, "critic_lr", "must be > 0"),
            (0 < self.tau <= 1, "tau", "must be in (0, 1]"),
            (self.exploration_noise >= 0, "exploration_noise", "must be >= 0"),
            (self.target_noise >= 0, "target_noise", "must be >= 0"),
            (self.target_noise_clip >= 0, "target_noise_clip", "must be >= 0"),
            (self.activation in ACTIVATION_NAMES, "activation", f"one of {ACTIVATION_NAMES}"),
        ]

    def exploration_at(self, env_steps: int) -> float:
        return self.exploration_noise


@contextlib.contextmanager
def held_fixed(*modules: torch.nn.Module):
    """Gradients pass through ``modules`` to their inputs but not into their weights."""
    params = [p for m in modules for p in m.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


class DDPGFamilyLearner(TorchLearner):
    """Critic and actor losses per team (see the module docstring)."""

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        self.settings: DDPGSettings = settings_of(self.config)
        layout = learner_value(self.config, LAYOUT_KEY)
        self.agents: tuple[str, ...] = tuple(layout["agents"])
        self.policy_of: dict[str, str] = dict(layout["policy_of"])
        self.obs_dim_of: dict[str, int] = dict(layout["obs_dim_of"])
        self.teams = {mid: list(index) for mid, index in layout["teams"].items()}
        for policy in set(self.policy_of.values()):
            target = self.module[target_module_id(policy)]
            target.load_state_dict(self.module[policy].state_dict())
            target.requires_grad_(False)

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        module = self.module[module_id]
        params = [p for p in self.get_parameters(module) if p.requires_grad]
        if module_id.startswith("target_") or not params:
            return
        settings = settings_of(self.config)
        is_actor = isinstance(module, DeterministicActorRLModule)
        lr = settings.actor_lr if is_actor else settings.critic_lr
        self.register_optimizer(
            module_id=module_id,
            optimizer=torch.optim.Adam(params, lr=lr),
            params=params,
            lr_or_lr_schedule=lr,
        )

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        raise NotImplementedError("the team loss spans modules: see compute_losses")

    def _actor(self, index: int, *, target: bool = False) -> DeterministicActorRLModule:
        policy = self.policy_of[self.agents[index]]
        return self.module[target_module_id(policy) if target else policy]

    def _critic(self, index: int) -> DDPGCritic:
        return self.module[critic_module_id(self.policy_of[self.agents[index]])]

    def _obs(self, obs: torch.Tensor, index: int) -> torch.Tensor:
        return obs[:, index, : self.obs_dim_of[self.agents[index]]]

    def _target_action(self, index: int, next_obs: torch.Tensor) -> torch.Tensor:
        """``mu'_i(o'_i)``, smoothed by clipped noise with ``smooth_target_policy``."""
        actor = self._actor(index, target=True)
        actions = actor.actions(next_obs)
        if not self.settings.smooth_target_policy:
            return actions
        return smoothed_target_actions(
            actions,
            self.settings.target_noise,
            self.settings.target_noise_clip,
            actor.low,
            actor.high,
            torch.randn_like(actions),
        )

    def _with_twin(self, values, twin_values, targets):
        """The TD loss's ``(values, targets)``: with ``twin_q`` both critics regress on
        the one target (the loss sums their squared errors)."""
        if twin_values is None:
            return values, targets
        if values.dim() == 2:  # (B, 1) mixed values: one column per critic
            values, twin_values, targets = (x.unsqueeze(-1) for x in (values, twin_values, targets))
        return torch.cat([values, twin_values], -1), torch.cat([targets, targets], -1)

    @override(TorchLearner)
    def compute_losses(self, *, fwd_out, batch) -> dict[str, Any]:
        settings = self.settings
        columns = batch[next(iter(self.teams))]
        obs, next_obs = columns["obs"][:, 0], columns["obs"][:, 1]  # (B, n, d)
        state, next_state = columns["state"][:, 0], columns["state"][:, 1]
        actions = columns["actions"][:, 0].float()  # (B, n, a)
        rewards = columns["rewards"][:, 0]  # (B, n)
        done = columns["terminated"][:, 0]
        mask, weights = columns["mask"][:, 0], columns["weights"]
        if settings.reward_standardize:
            rewards = standardized_rewards(rewards, mask)
        n_agents = len(self.agents)
        policy_actions = torch.stack(
            [self._actor(i).actions(self._obs(obs, i)) for i in range(n_agents)], dim=1
        )
        with torch.no_grad():
            next_actions = torch.stack(
                [self._target_action(i, self._obs(next_obs, i)) for i in range(n_agents)],
                dim=1,
            )

        losses, td_errors = {}, []
        for module_id, index in self.teams.items():
            mode = settings.critic_mode
            if mode == "local":
                critic_loss, actor_loss, td = self._local(
                    index, obs, next_obs, actions, policy_actions, next_actions, rewards, done
                )
            elif mode == "central":
                critic_loss, actor_loss, td = self._central(
                    index,
                    state,
                    next_state,
                    actions,
                    policy_actions,
                    next_actions,
                    rewards,
                    done,
                )
            else:
                critic_loss, actor_loss, td, q_tot = self._mixed(
                    module_id,
                    index,
                    obs,
                    next_obs,
                    state,
                    next_state,
                    actions,
                    policy_actions,
                    next_actions,
                    rewards,
                    done,
                )
            values, targets = critic_loss
            critic_term = masked_td_loss(values, targets, mask.unsqueeze(1), weights)
            actor_term = deterministic_policy_loss(actor_loss, mask)
            losses[module_id] = critic_term + actor_term
            td_errors.append(td)
            valid = mask.bool()
            self.metrics.log_dict(
                {
                    "critic_loss": critic_term.detach(),
                    "actor_loss": actor_term.detach(),
                    "td_error_abs": td.abs().mean(-1)[valid].mean(),
                    "q_mean": (values if values.dim() == 1 else values.mean(-1))[valid].mean(),
                },
                key=module_id,
                window=1,
            )
        all_td = torch.cat(td_errors, dim=-1).unsqueeze(1).cpu().numpy()  # (B, 1, groups)
        first = next(iter(self.teams))
        self.metrics.delete(first, TD_ERRORS, key_error=False)
        self.metrics.log_value(key=(first, TD_ERRORS), value=all_td, reduce="item_series")
        return losses

    def _local(self, index, obs, next_obs, actions, policy_actions, next_actions, rewards, done):
        """IDDPG: ``Q_i(o_i, a_i)``, each agent's own reward."""
        values, twins, targets, objective = [], [], [], []
        for i in index:
            critic = self._critic(i)
            o, o2 = self._obs(obs, i), self._obs(next_obs, i)
            taken = torch.cat([o, actions[:, i]], -1)
            values.append(critic.value(taken))
            if critic.twin_q:
                twins.append(critic.value(taken, twin=True))
            with torch.no_grad():
                next_q = critic.target_value(torch.cat([o2, next_actions[:, i]], -1))
            targets.append(td_targets(rewards[:, i], done, next_q, self.settings.gamma))
            with held_fixed(critic):
                objective.append(critic.value(torch.cat([o, policy_actions[:, i]], -1)))
        values, targets = torch.stack(values, -1), torch.stack(targets, -1)  # (B, k)
        td = (targets - values).detach()
        twins = torch.stack(twins, -1).unsqueeze(1) if twins else None
        loss_pair = self._with_twin(values.unsqueeze(1), twins, targets.unsqueeze(1))
        return loss_pair, torch.stack(objective, -1), td

    def _central(
        self, index, state, next_state, actions, policy_actions, next_actions, rewards, done
    ):
        """MADDPG: ``Q_i(s, a_1..a_n)`` on the team reward; actor i through its own action."""
        team_actions = actions[:, index]  # (B, k, a)
        flat = team_actions.flatten(1)
        next_flat = next_actions[:, index].flatten(1)
        r_team = team_sum(rewards, index)
        values, twins, targets, objective = [], [], [], []
        for k, i in enumerate(index):
            critic = self._critic(i)
            taken = torch.cat([state, flat], -1)
            values.append(critic.value(taken))
            if critic.twin_q:
                twins.append(critic.value(taken, twin=True))
            with torch.no_grad():
                next_q = critic.target_value(torch.cat([next_state, next_flat], -1))
            targets.append(td_targets(r_team, done, next_q, self.settings.gamma))
            joint = joint_actions_with_own(team_actions, policy_actions[:, index], k)
            with held_fixed(critic):
                objective.append(critic.value(torch.cat([state, joint.flatten(1)], -1)))
        values, targets = torch.stack(values, -1), torch.stack(targets, -1)
        td = (targets - values).detach()
        twins = torch.stack(twins, -1).unsqueeze(1) if twins else None
        loss_pair = self._with_twin(values.unsqueeze(1), twins, targets.unsqueeze(1))
        return loss_pair, torch.stack(objective, -1), td

    def _mixed(
        self,
        module_id,
        index,
        obs,
        next_obs,
        state,
        next_state,
        actions,
        policy_actions,
        next_actions,
        rewards,
        done,
    ):
        """FACMAC: ``Q_tot = mixer(Q_i(o_i, a_i); s)``; actors through every current action."""
        mixer: JointQMixer = self.module[module_id]
        mixer.observe_states(state)
        twin_q = self.settings.twin_q
        agent_q, twin_agent_q, next_q, twin_next_q, policy_q = [], [], [], [], []
        critics = [self._critic(i) for i in index]
        for critic, i in zip(critics, index, strict=True):
            o, o2 = self._obs(obs, i), self._obs(next_obs, i)
            taken, next_taken = (
                torch.cat([o, actions[:, i]], -1),
                torch.cat([o2, next_actions[:, i]], -1),
            )
            agent_q.append(critic.value(taken))
            with torch.no_grad():
                next_q.append(critic.value(next_taken, target=True))
            if twin_q:
                twin_agent_q.append(critic.value(taken, twin=True))
                with torch.no_grad():
                    twin_next_q.append(critic.value(next_taken, target=True, twin=True))
        with held_fixed(mixer, *critics):
            for critic, i in zip(critics, index, strict=True):
                o = self._obs(obs, i)
                policy_q.append(critic.value(torch.cat([o, policy_actions[:, i]], -1)))
            objective = mixer.mix(torch.stack(policy_q, -1)[:, None], state[:, None])[:, 0]

        def mixed(values, states, **kwargs):
            return mixer.mix(torch.stack(values, -1)[:, None], states[:, None], **kwargs)[:, 0]

        q_tot = mixed(agent_q, state)
        twin_tot = mixed(twin_agent_q, state, twin=True).unsqueeze(1) if twin_q else None
        with torch.no_grad():
            next_tot = mixed(next_q, next_state, target=True)
            if twin_q:  # clipped double Q on the mixed values
                clipped = torch.minimum(
                    next_tot, mixed(twin_next_q, next_state, target=True, twin=True)
                )
                # How far the min lowers the first target mixer's bootstrap: the twin acts.
                self.metrics.log_value(
                    key=(module_id, "twin_target_gap"),
                    value=(next_tot - clipped).mean(),
                    window=1,
                )
                next_tot = clipped
        targets = td_targets(team_sum(rewards, index), done, next_tot, self.settings.gamma)
        td = (targets - q_tot).detach().unsqueeze(-1)
        loss_pair = self._with_twin(q_tot.unsqueeze(1), twin_tot, targets.unsqueeze(1))
        return loss_pair, objective, td, q_tot

    @override(TorchLearner)
    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        tau = self.settings.tau
        for policy in set(self.policy_of.values()):
            polyak_update(self.module[target_module_id(policy)], self.module[policy], tau)
            self.module[critic_module_id(policy)].sync_target(tau)
        for module_id in self.teams:
            self.module[module_id].sync_target(tau)


class DDPGFamilyConfig(AlgorithmConfig):
    """RLlib config whose algorithm is ``TeamReplayAlgorithm`` and learner
    ``DDPGFamilyLearner``."""

    def __init__(self, algo_class=None) -> None:
        super().__init__(algo_class=algo_class or TeamReplayAlgorithm)

    @override(AlgorithmConfig)
    def get_default_learner_class(self):
        return DDPGFamilyLearner

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=DeterministicActorRLModule)


def build_ddpg_family(
    settings: DDPGSettings, env: EnvHandle, share_policy: str, seed: int | None, *, algo: str
) -> DDPGFamilyConfig:
    """The RLlib config of ``iddpg`` / ``maddpg`` / ``facmac`` (``settings.critic_mode``);
    the registry's ``check_env`` has refused discrete action spaces."""
    layout = env.layout
    mapping = policy_mapping(env, share_policy)
    policies = sorted(set(mapping.values()))
    agents = tuple(sorted(layout.agents))
    obs_dim_of = {a: int(np.prod(layout.observation_spaces[a].shape)) for a in agents}
    action_dim_of = {a: int(np.prod(layout.action_spaces[a].shape)) for a in agents}
    teams = layout.teams
    team_ids = team_module_ids(env, TEAM_MODULE)
    team_of = {a: team for team, members in teams.items() for a in members}
    state_dim = int(layout.state_space.shape[0])
    actor_model = {
        "hiddens": list(settings.actor_hiddens),
        "activation": settings.activation,
        "exploration_noise": settings.exploration_noise,
    }
    specs: dict[str, RLModuleSpec] = {}
    for policy in policies:
        first = next(a for a in agents if mapping[a] == policy)
        spaces = {
            "observation_space": layout.observation_spaces[first],
            "action_space": layout.action_spaces[first],
        }
        specs[policy] = RLModuleSpec(
            module_class=DeterministicActorRLModule, model_config=actor_model, **spaces
        )
        specs[target_module_id(policy)] = RLModuleSpec(
            module_class=DeterministicActorRLModule,
            model_config=actor_model,
            learner_only=True,
            **spaces,
        )
        if settings.critic_mode == "central":
            members = teams[team_of[first]]
            if any(team_of[a] != team_of[first] for a in agents if mapping[a] == policy):
                raise ConfigError(
                    f"maddpg: policy {policy!r} is shared by agents of several teams; each "
                    "team needs its own central critic (use share_policy=group)"
                )
            input_dim = state_dim + sum(action_dim_of[a] for a in members)
        else:
            input_dim = obs_dim_of[first] + action_dim_of[first]
        specs[critic_module_id(policy)] = RLModuleSpec(
            module_class=DDPGCritic,
            learner_only=True,
            model_config={
                "input_dim": input_dim,
                "hiddens": list(settings.critic_hiddens),
                "activation": settings.activation,
                "twin_q": settings.twin_q,
            },
            **spaces,
        )
    specs.update(
        mixer_specs(
            env,
            team_ids,
            settings.mixer if settings.critic_mode == "mixed" else "none",
            settings.mixer_embed_dim,
            settings.hypernet_embed_dim,
            state_normalize=settings.state_normalize,
            twin=settings.twin_q,
        )
    )
    config = DDPGFamilyConfig().training(
        gamma=settings.gamma, grad_clip=settings.grad_clip, grad_clip_by="global_norm"
    )
    return team_replay_config(config, settings, env, mapping, specs, team_ids, seed)


def build_iddpg(settings, env, share_policy, seed):
    return build_ddpg_family(settings, env, share_policy, seed, algo="iddpg")


def build_maddpg(settings, env, share_policy, seed):
    return build_ddpg_family(settings, env, share_policy, seed, algo="maddpg")


def build_facmac(settings, env, share_policy, seed):
    return build_ddpg_family(settings, env, share_policy, seed, algo="facmac")
