"""Joint Q-learning on RLlib's new stack: ``iql``, ``vdn``, ``qmix`` (MARLlib / PyMARL).

Data flow:

1. Env runners act with one ``QAgentRLModule`` per policy of the sharing mode
   (epsilon-greedy on MARLlib's schedule) and return complete episodes
   (``batch_mode="complete_episodes"``).
2. ``JointQ.training_step`` turns each ``MultiAgentEpisode`` into a time-aligned
   ``TeamEpisode`` and stores it in a ``TeamEpisodeStore`` (whole team episodes; see
   ``replay/team_episodes.py`` for why not RLlib's multi-agent buffer).
3. It samples team transitions (feed-forward agents) or whole episodes (GRU agents)
   and hands them to the learner as one batch under each team's mixer module.
4. ``JointQLearner.compute_losses`` runs every agent's online and target Q network on
   the batch, mixes per team and takes the joint double-Q TD loss (``ops.joint_q``);
   the per-step TD errors go back to the store as ROER / PER priorities.
5. Target networks: a hard copy every ``target_network_update_freq`` sampled episodes
   (MARLlib), or Polyak averaging with ``tau`` after every update.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

from marllib_ext.algos.config import ACTIVATION_NAMES, Check, Settings
from marllib_ext.algos.policy_sharing import PolicyMappingFn, policy_mapping
from marllib_ext.algos.progress import ProgressColumn, read_number
from marllib_ext.envs.adapter import STATE_KEY
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
from marllib_ext.ops.roer import js_priority, kl_priority, per_priority
from marllib_ext.policies.q_agent import (
    JOINT_Q_MIXERS,
    JointQMixer,
    QAgentRLModule,
    mixer_module_id,
    polyak_update,
    target_module_id,
)
from marllib_ext.replay.team_episodes import SampledTeamBatch, TeamEpisode, TeamEpisodeStore
from marllib_ext.rllib_compat import settings_of, with_settings

PER_TYPES = ("uniform", "PER", "KL", "JS")
OPTIMIZERS = ("rmsprop", "adam")
TD_ERRORS = "td_errors"  # learner result key: per-step TD errors, (B, L, groups)
PROGRESS_KEY = "joint_q"  # result[PROGRESS_KEY]: epsilon, buffer size, TD error, Q_tot


@dataclass(frozen=True)
class JointQSettings(Settings):
    """MARLlib's joint-Q hyperparameters (``iql.yaml``, ``vdn.yaml``, ``qmix.yaml``)."""

    mixer: str
    batch_episode: int
    lr: float
    optimizer: str
    gamma: float
    buffer_size: int
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
    grad_clip: float | None
    training_intensity: float
    learning_starts: int | None
    per_type: str
    temp: float
    min_clip: float
    max_clip: float
    js_min_weight: float
    js_max_weight: float
    per_beta: float
    std_normalize: bool
    per_alpha: float
    per_importance_beta: float
    num_env_runners: int
    num_envs_per_env_runner: int
    num_cpus_per_env_runner: float
    num_learners: int
    num_gpus_per_learner: float

    def checks(self) -> list[Check]:
        return [
            (self.mixer in JOINT_Q_MIXERS, "mixer", f"one of {JOINT_Q_MIXERS}"),
            (self.batch_episode > 0, "batch_episode", "must be > 0"),
            (self.lr > 0, "lr", "must be > 0"),
            (self.optimizer in OPTIMIZERS, "optimizer", f"one of {OPTIMIZERS}"),
            (0 <= self.gamma <= 1, "gamma", "must be in [0, 1]"),
            (self.buffer_size >= self.batch_episode, "buffer_size", "must be >= batch_episode"),
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
            (self.training_intensity > 0, "training_intensity", "must be > 0"),
            (
                self.learning_starts is None or self.learning_starts >= 1,
                "learning_starts",
                "null (batch_episode) or >= 1 episode",
            ),
            (self.per_type in PER_TYPES, "per_type", f"one of {PER_TYPES}"),
            (self.temp > 0, "temp", "must be > 0"),
            (0 < self.min_clip <= self.max_clip, "min_clip", "need 0 < min_clip <= max_clip"),
            (
                0 < self.js_min_weight <= self.js_max_weight,
                "js_min_weight",
                "need 0 < js_min_weight <= js_max_weight",
            ),
            (0 < self.per_beta <= 1, "per_beta", "must be in (0, 1]"),
            (self.per_importance_beta >= 0, "per_importance_beta", "must be >= 0"),
            (
                self.num_learners <= 1,
                "num_learners",
                "joint Q-learning trains on one learner (0 or 1): its TD loss couples every "
                "agent network and the mixer in one backward pass outside the modules' "
                "forward_train, which data-parallel (DDP) learners would not synchronize",
            ),
        ]

    @property
    def episodes_before_learning(self) -> int:
        return self.batch_episode if self.learning_starts is None else self.learning_starts


# ---- episodes -> team episodes ------------------------------------------------------------
def team_episode(episode, agents: tuple[str, ...], obs_dim: int) -> TeamEpisode:
    """A finished ``MultiAgentEpisode`` as a time-aligned ``TeamEpisode``: row ``t`` of
    every array is env step ``t`` for every agent (agents in ``agents`` order,
    observations zero-padded to ``obs_dim``, the state from ``info["state"]``)."""
    if episode.env_t_started != 0:
        raise ValueError(
            f"episode {episode.id_!r} starts at env step {episode.env_t_started}; joint "
            "Q-learning stores whole episodes (batch_mode='complete_episodes')"
        )
    lengths = {aid: len(episode.agent_episodes[aid]) for aid in agents}
    if len(set(lengths.values())) != 1:
        raise ValueError(
            f"agents of episode {episode.id_!r} acted on different numbers of steps "
            f"{lengths}; joint Q-learning needs every agent to act on every env step"
        )
    length = next(iter(lengths.values()))
    obs = np.zeros((length + 1, len(agents), obs_dim), np.float32)
    rewards = np.zeros((length, len(agents)), np.float32)
    actions = []
    for index, aid in enumerate(agents):
        agent_episode = episode.agent_episodes[aid]
        agent_obs = np.asarray(agent_episode.get_observations(), np.float32)
        obs[:, index, : agent_obs[0].size] = agent_obs.reshape(length + 1, -1)
        rewards[:, index] = np.asarray(agent_episode.get_rewards(), np.float32)
        actions.append(np.asarray(agent_episode.get_actions()))
    infos = episode.agent_episodes[agents[0]].get_infos()
    state = np.stack([np.asarray(info[STATE_KEY], np.float32).reshape(-1) for info in infos])
    return TeamEpisode(
        obs=obs,
        state=state,
        actions=np.stack(actions, axis=1),
        rewards=rewards,
        terminated=bool(episode.is_terminated),
    )


def priorities_of(td_errors: np.ndarray, settings: JointQSettings) -> np.ndarray:
    """Per-step priority from per-step TD errors ``(B, L, groups)`` (a team's TD error
    per team, or each agent's for IQL): seed 003's rule (KL / JS) or PER's ``|delta|``,
    averaged over the groups -> ``(B, L)``."""
    td = torch.as_tensor(td_errors, dtype=torch.float64)
    flat = td.reshape(-1)
    if settings.per_type == "KL":
        priority, _ = kl_priority(
            flat,
            temp=settings.temp,
            min_clip=settings.min_clip,
            max_clip=settings.max_clip,
            normalize=settings.std_normalize,
        )
    elif settings.per_type == "JS":
        priority, _ = js_priority(
            flat,
            temp=settings.temp,
            max_clip=settings.max_clip,
            js_min_weight=settings.js_min_weight,
            js_max_weight=settings.js_max_weight,
            normalize=settings.std_normalize,
        )
    else:
        priority = per_priority(flat)
    return priority.reshape(td.shape).mean(dim=-1).numpy()


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
        layout = self.config.learner_config_dict["joint_q_layout"]
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
                    "q_tot_mean": (values if values.dim() == 2 else values.sum(-1))[valid].mean(),
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
        episodes = int(timesteps.get("num_episodes_sampled_lifetime", 0))
        if episodes - self.last_target_sync >= settings.target_network_update_freq:
            self.sync_targets(1.0)
            self.last_target_sync = episodes

    def sync_targets(self, tau: float) -> None:
        for policy in set(self.policy_of.values()):
            polyak_update(self._target(policy), self.module[policy], tau)
        for team in self.teams:
            self.module[team.module_id].sync_target(tau)


# ---- algorithm ----------------------------------------------------------------------------
class JointQ(Algorithm):
    """Samples complete episodes, stores team episodes, trains on replayed batches."""

    @override(Algorithm)
    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        settings: JointQSettings = settings_of(self.config)
        self.joint_q_settings = settings
        layout = self.config.learner_config_dict["joint_q_layout"]
        self.team_agents: tuple[str, ...] = tuple(layout["agents"])
        self.team_obs_dim = max(layout["obs_dim_of"].values())
        self.mixer_ids = list(layout["teams"])
        self.agent_policies = sorted(set(layout["policy_of"].values()))
        self.store = TeamEpisodeStore(
            settings.buffer_size,
            prioritized=settings.per_type != "uniform",
            alpha=settings.per_alpha if settings.per_type == "PER" else 1.0,
            importance_beta=settings.per_importance_beta,
            per_beta=settings.per_beta if settings.per_type in ("KL", "JS") else 1.0,
            seed=self.config.seed,
        )
        self.episodes_sampled = 0
        self.update_credit = 0.0
        self.last_td_error = float("nan")

    @override(Algorithm)
    def training_step(self) -> None:
        settings = self.joint_q_settings
        episodes, runner_results = synchronous_parallel_sample(
            worker_set=self.env_runner_group,
            concat=True,
            sample_timeout_s=self.config.sample_timeout_s,
            _uses_new_env_runners=True,
            _return_metrics=True,
        )
        self.metrics.aggregate(runner_results, key=ENV_RUNNER_RESULTS)
        for episode in episodes:
            self.store.add(team_episode(episode, self.team_agents, self.team_obs_dim))
        self.episodes_sampled += len(episodes)
        env_steps = self.metrics.peek(
            (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
        )

        self.update_credit += len(episodes) * settings.training_intensity
        updates = int(self.update_credit)
        self.update_credit -= updates
        if len(self.store) < settings.episodes_before_learning:
            updates = 0
        for _ in range(updates):
            sampled = self._sample()
            policy_batch = SampleBatch(sampled.columns())
            learner_results = self.learner_group.update(
                batch=MultiAgentBatch(
                    {mid: policy_batch for mid in self.mixer_ids},
                    env_steps=int(sampled.mask.sum()),
                ),
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps,
                    "num_episodes_sampled_lifetime": self.episodes_sampled,
                },
            )
            # One learner, one item: this update's (B, L, groups) TD errors.
            td_errors = np.asarray(learner_results[0][self.mixer_ids[0]].pop(TD_ERRORS).peek()[-1])
            self.last_td_error = float(np.abs(td_errors).mean(-1)[sampled.mask > 0].mean())
            self.store.update_priorities(sampled, priorities_of(td_errors, settings))
            self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        if updates:
            self.env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group,
                policies=self.agent_policies,
                inference_only=True,
            )
        self.metrics.log_dict(
            {
                "epsilon": linear_schedule(
                    env_steps,
                    settings.initial_epsilon,
                    settings.final_epsilon,
                    settings.epsilon_timesteps,
                ),
                "buffer_episodes": len(self.store),
                "episodes_sampled": self.episodes_sampled,
                "updates": updates,
                "td_error_abs": self.last_td_error,
            },
            key=PROGRESS_KEY,
            window=1,
        )

    def _sample(self) -> SampledTeamBatch:
        settings = self.joint_q_settings
        if settings.use_rnn:
            return self.store.sample_episodes(settings.batch_episode)
        # Feed-forward agents: as many single transitions as batch_episode episodes hold.
        mean_length = self.store.num_transitions / max(1, len(self.store))
        return self.store.sample_transitions(max(1, round(settings.batch_episode * mean_length)))

    @override(Algorithm)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        state = super().get_state(components, not_components=not_components, **kwargs)
        state["team_replay"] = {
            "store": self.store.get_state(),
            "episodes_sampled": self.episodes_sampled,
            "update_credit": self.update_credit,
        }
        return state

    @override(Algorithm)
    def set_state(self, state: dict) -> None:
        replay = state.get("team_replay")
        if replay is not None:
            self.store.set_state(replay["store"])
            self.episodes_sampled = int(replay["episodes_sampled"])
            self.update_credit = float(replay["update_credit"])
        super().set_state(state)


class JointQConfig(AlgorithmConfig):
    """RLlib config whose algorithm is ``JointQ`` and learner ``JointQLearner``."""

    def __init__(self, algo_class=None) -> None:
        super().__init__(algo_class=algo_class or JointQ)

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
    policies = sorted(set(mapping.values()))
    agents = tuple(sorted(layout.agents))
    obs_dim_of = {a: int(np.prod(layout.observation_spaces[a].shape)) for a in agents}
    teams = layout.teams
    team_ids = {team: mixer_module_id(team if len(teams) > 1 else None) for team in teams}
    agent_model = {
        "hiddens": list(settings.hiddens),
        "activation": settings.activation,
        "use_rnn": settings.use_rnn,
        "rnn_hidden_dim": settings.rnn_hidden_dim,
        "epsilon_start": settings.initial_epsilon,
        "epsilon_end": settings.final_epsilon,
        "epsilon_timesteps": settings.epsilon_timesteps,
    }
    first_agent_of = {p: next(a for a in agents if mapping[a] == p) for p in policies}
    specs: dict[str, RLModuleSpec] = {}
    for policy in policies:
        spaces = {
            "observation_space": layout.observation_spaces[first_agent_of[policy]],
            "action_space": layout.action_spaces[first_agent_of[policy]],
        }
        specs[policy] = RLModuleSpec(
            module_class=QAgentRLModule, model_config=agent_model, **spaces
        )
        specs[target_module_id(policy)] = RLModuleSpec(
            module_class=QAgentRLModule, model_config=agent_model, learner_only=True, **spaces
        )
    state_space = layout.state_space
    for team, module_id in team_ids.items():
        specs[module_id] = RLModuleSpec(
            module_class=JointQMixer,
            learner_only=True,
            observation_space=state_space,
            action_space=layout.action_spaces[agents[0]],
            model_config={
                "mixer": settings.mixer,
                "n_agents": len(teams[team]),
                "state_dim": int(state_space.shape[0]),
                "mixer_embed_dim": settings.mixer_embed_dim,
                "hypernet_embed_dim": settings.hypernet_embed_dim,
            },
        )
    joint_q_layout = {
        "agents": agents,
        "policy_of": {a: mapping[a] for a in agents},
        "obs_dim_of": obs_dim_of,
        "teams": {
            team_ids[team]: [agents.index(a) for a in members] for team, members in teams.items()
        },
    }
    config = (
        JointQConfig()
        .environment(env.register_with_rllib(), env_config=dict(env.env_args))
        .env_runners(
            num_env_runners=settings.num_env_runners,
            num_envs_per_env_runner=settings.num_envs_per_env_runner,
            num_cpus_per_env_runner=settings.num_cpus_per_env_runner,
            batch_mode="complete_episodes",
        )
        .learners(
            num_learners=settings.num_learners,
            num_gpus_per_learner=settings.num_gpus_per_learner,
        )
        .fault_tolerance(restart_failed_env_runners=True)
        .training(
            gamma=settings.gamma,
            lr=settings.lr,
            grad_clip=settings.grad_clip,
            grad_clip_by="global_norm",
        )
        .multi_agent(
            policies=set(specs),
            policy_mapping_fn=PolicyMappingFn(mapping),
            policies_to_train=[mid for mid in specs if not mid.startswith("target_")],
        )
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .debugging(seed=seed)
    )
    config = with_settings(config, settings)
    config.learner_config_dict["joint_q_layout"] = joint_q_layout
    return config


def build_iql(settings, env, share_policy, seed):
    return build_joint_q(settings, env, share_policy, seed, algo="iql")


def build_vdn(settings, env, share_policy, seed):
    return build_joint_q(settings, env, share_policy, seed, algo="vdn")


def build_qmix(settings, env, share_policy, seed):
    return build_joint_q(settings, env, share_policy, seed, algo="qmix")


# ---- progress -----------------------------------------------------------------------------
PROGRESS_COLUMNS = (
    ProgressColumn("jq_epsilon", "eps", ".3f"),
    ProgressColumn("jq_buffer_episodes", "buffer", ".0f"),
    ProgressColumn("jq_td_error", "td", ".3f"),
    ProgressColumn("jq_q_tot", "Qtot", ".2f"),
)


def progress(result: Mapping[str, Any]) -> dict[str, float]:
    learners = result.get(LEARNER_RESULTS, {})
    q_tot = [
        read_number(learners, mid, "q_tot_mean")
        for mid in learners
        if isinstance(mid, str) and mid.startswith("joint_q")
    ]
    return {
        "jq_epsilon": read_number(result, PROGRESS_KEY, "epsilon"),
        "jq_buffer_episodes": read_number(result, PROGRESS_KEY, "buffer_episodes"),
        "jq_td_error": read_number(result, PROGRESS_KEY, "td_error_abs"),
        "jq_q_tot": float(np.nanmean(q_tot)) if q_tot else float("nan"),
    }
