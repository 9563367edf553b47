"""SAC with ROER prioritized replay (seed 003) on RLlib's new API stack: ``sac_roer``
(single-agent gymnasium envs) and ``isac_roer`` (independent SAC, multi-agent).

The RLModule is RLlib's default SAC module plus a state-value network ``V(s)``. The
learner adds to RLlib's SAC losses a value loss on ``diff = min(Q1, Q2)(s, a) - V(s)``
(Gumbel for KL, ``softplus - log 2`` for JS, ``diff^2 / 2`` otherwise) and replaces the
per-sample "TD error" that RLlib's SAC ``training_step`` hands to the replay buffer's
``update_priorities`` by the ROER priority computed from
``delta = r + gamma^n * (1 - terminated) * V(s') - V(s)``. The buffers below blend the
new priority into the stored one (EMA with ``per_beta``).

``per_type``: ``KL`` / ``JS`` (ROER buffers, sampling proportional to the priority,
``alpha=1``, no importance weights: ``beta=0``), ``PER`` (RLlib's prioritized buffer on
``|Q - target|``, ``per_alpha`` / ``per_importance_beta`` from YAML), ``uniform``
(RLlib's plain episode buffer).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.sac import SAC, SACConfig
from ray.rllib.algorithms.sac.sac_learner import QF_PREDS, QF_TWIN_PREDS
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.replay_buffers.multi_agent_prioritized_episode_buffer import (
    MultiAgentPrioritizedEpisodeReplayBuffer,
)
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

from marllib_ext.algos.config import ACTIVATIONS, require_all
from marllib_ext.algos.policy_sharing import PolicyMappingFn
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.ops.roer import (
    ema_priority,
    gumbel_value_loss,
    js_priority,
    js_value_loss,
    kl_priority,
    squared_value_loss,
    state_value_td_error,
)
from marllib_ext.policies.joint_critic import mlp

ROER_CONFIG_KEY = "roer"
PER_TYPES = ("KL", "JS", "PER", "uniform")
VALUE_LOSS_KEY = "value_loss"


@dataclass(frozen=True)
class ROERSettings:
    """SAC core plus ROER's hyperparameters (seed 003 tables)."""

    per_type: str
    temp: float
    min_clip: float
    max_clip: float
    gumbel_max_clip: float
    js_min_weight: float
    js_max_weight: float
    per_beta: float
    std_normalize: bool
    per_alpha: float
    per_importance_beta: float
    gamma: float
    actor_lr: float
    critic_lr: float
    alpha_lr: float
    tau: float
    initial_alpha: float
    n_step: int
    twin_q: bool
    train_batch_size: int
    buffer_capacity: int
    num_steps_sampled_before_learning_starts: int
    training_intensity: float | None
    rollout_fragment_length: int
    hiddens: list[int]
    activation: str
    num_env_runners: int
    num_envs_per_env_runner: int
    num_learners: int
    num_gpus_per_learner: float

    def __post_init__(self) -> None:
        checks = [
            (self.per_type in PER_TYPES, "per_type", f"one of {PER_TYPES}"),
            (self.temp > 0, "temp", "must be > 0"),
            (0 < self.min_clip <= self.max_clip, "min_clip", "need 0 < min_clip <= max_clip"),
            (self.gumbel_max_clip > 0, "gumbel_max_clip", "must be > 0"),
            (
                0 < self.js_min_weight <= self.js_max_weight,
                "js_min_weight",
                "need 0 < js_min_weight <= js_max_weight",
            ),
            (0 < self.per_beta <= 1, "per_beta", "must be in (0, 1]"),
            (0 <= self.gamma <= 1, "gamma", "must be in [0, 1]"),
            (self.train_batch_size > 0, "train_batch_size", "must be > 0"),
            (self.buffer_capacity > 0, "buffer_capacity", "must be > 0"),
            (self.n_step >= 1, "n_step", "must be >= 1"),
            (self.activation in ACTIVATIONS, "activation", f"one of {ACTIVATIONS}"),
        ]
        require_all(self, checks)


# ---- replay buffers: ROER priorities blended into the stored ones ---------------------
def _blend_into_tree(tree, indices, priorities, alpha: float, per_beta: float) -> np.ndarray:
    """EMA of the new priorities with the stored ones (the tree holds ``p ** alpha``)."""
    old = np.array([tree[idx] for idx in indices], dtype=np.float64) ** (1.0 / alpha)
    return ema_priority(
        torch.from_numpy(old),
        torch.as_tensor(np.asarray(priorities), dtype=torch.float64),
        per_beta,
    ).numpy()


class ROERPrioritizedEpisodeReplayBuffer(PrioritizedEpisodeReplayBuffer):
    """RLlib's prioritized episode buffer; ``update_priorities`` stores
    ``(1 - per_beta) * p_old + per_beta * p_new``."""

    def __init__(self, *args, per_beta: float = 1.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.per_beta = per_beta

    def update_priorities(self, priorities, module_id=None) -> None:
        blended = _blend_into_tree(
            self._sum_segment, self._last_sampled_indices, priorities, self._alpha, self.per_beta
        )
        super().update_priorities(blended, module_id)


class ROERMultiAgentPrioritizedEpisodeReplayBuffer(MultiAgentPrioritizedEpisodeReplayBuffer):
    """Multi-agent version: one EMA per module's segment tree."""

    def __init__(self, *args, per_beta: float = 1.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.per_beta = per_beta

    def update_priorities(self, priorities, module_id) -> None:
        blended = _blend_into_tree(
            self._module_to_sum_segment[module_id],
            self._module_to_last_sampled_indices[module_id],
            priorities,
            self._alpha,
            self.per_beta,
        )
        super().update_priorities(blended, module_id)


# ---- RLModule and Learner ------------------------------------------------------------
class ROERSACTorchRLModule(DefaultSACTorchRLModule):
    """RLlib's SAC module plus ``V(s)`` (learner side only): ``model_config`` keys
    ``value_hiddens`` and ``value_activation``."""

    def setup(self) -> None:
        super().setup()
        if not self.inference_only:
            self.vf = mlp(
                int(gym.spaces.flatdim(self.observation_space)),
                list(self.model_config["value_hiddens"]),
                1,
                self.model_config["value_activation"],
            )

    def get_non_inference_attributes(self) -> list[str]:
        return [*super().get_non_inference_attributes(), "vf"]

    def compute_state_values(self, observations: torch.Tensor) -> torch.Tensor:
        """``V(s)``, shape ``(B,)``."""
        return self.vf(observations.reshape(observations.shape[0], -1).float()).squeeze(-1)


class ROERSACLearner(SACTorchLearner):
    """SAC learner with the ROER value network, value loss and priorities."""

    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        super().configure_optimizers_for_module(module_id, config)
        params = self.get_parameters(self._module[module_id].vf)
        self.register_optimizer(
            module_id=module_id,
            optimizer_name="value",
            optimizer=torch.optim.Adam(params, eps=1e-7),
            params=params,
            lr_or_lr_schedule=config.critic_lr,
        )

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        total = super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        roer = config.learner_config_dict[ROER_CONFIG_KEY]
        module = self._module[module_id].unwrapped()
        values = module.compute_state_values(batch[Columns.OBS])
        q = self._q_of_taken_actions(module, batch, fwd_out).detach()
        diff = q - values
        per_type = roer["per_type"]
        if per_type == "KL":
            value_loss, norm = gumbel_value_loss(
                diff, temp=roer["temp"], gumbel_max_clip=roer["gumbel_max_clip"]
            )
        elif per_type == "JS":
            value_loss, norm = js_value_loss(
                diff, temp=roer["temp"], gumbel_max_clip=roer["gumbel_max_clip"]
            )
        else:
            value_loss, norm = squared_value_loss(diff), torch.tensor(1.0)
        value_loss = value_loss.mean()

        with torch.no_grad():
            td_error = state_value_td_error(
                batch[Columns.REWARDS],
                values.detach(),
                module.compute_state_values(batch[Columns.NEXT_OBS]),
                batch[Columns.TERMINATEDS],
                config.gamma ** batch["n_step"],
            )
        metrics = {
            VALUE_LOSS_KEY: value_loss,
            "norm": norm,
            "td_error_mean": td_error.mean(),
            "v_mean": values.mean(),
        }
        if per_type in ("KL", "JS"):
            if per_type == "KL":
                priority, weight = kl_priority(
                    td_error,
                    temp=roer["temp"],
                    min_clip=roer["min_clip"],
                    max_clip=roer["max_clip"],
                    normalize=roer["std_normalize"],
                )
            else:
                priority, weight = js_priority(
                    td_error,
                    temp=roer["temp"],
                    max_clip=roer["max_clip"],
                    js_min_weight=roer["js_min_weight"],
                    js_max_weight=roer["js_max_weight"],
                    normalize=roer["std_normalize"],
                )
            # The SAC training step reads this entry and passes it to the buffer's
            # update_priorities: replace RLlib's |Q - target| with the ROER priority.
            self.metrics.delete(module_id, TD_ERROR_KEY, key_error=False)
            self.metrics.log_value(
                key=(module_id, TD_ERROR_KEY), value=priority, reduce="item_series"
            )
            metrics.update({"priority_mean": priority.mean(), "per_weight": weight.mean()})
        self.metrics.log_dict(metrics, key=module_id, window=1)
        self._temp_losses[(module_id, "value_loss")] = value_loss
        return total + value_loss

    @staticmethod
    def _q_of_taken_actions(module, batch, fwd_out) -> torch.Tensor:
        q, q_twin = fwd_out[QF_PREDS], fwd_out.get(QF_TWIN_PREDS)
        if isinstance(module.action_space, gym.spaces.Discrete):
            actions = batch[Columns.ACTIONS].to(dtype=torch.int64).unsqueeze(-1)
            q = q.gather(dim=-1, index=actions).squeeze(-1)
            if q_twin is not None:
                q_twin = q_twin.gather(dim=-1, index=actions).squeeze(-1)
        return q if q_twin is None else torch.min(q, q_twin)


# ---- config builders -----------------------------------------------------------------
def _replay_buffer_config(settings: ROERSettings, multi_agent: bool) -> dict:
    prefix = "MultiAgent" if multi_agent else ""
    capacity = settings.buffer_capacity
    if settings.per_type == "uniform":
        return {"type": f"{prefix}EpisodeReplayBuffer", "capacity": capacity}
    if settings.per_type == "PER":
        return {
            "type": f"{prefix}PrioritizedEpisodeReplayBuffer",
            "capacity": capacity,
            "alpha": settings.per_alpha,
            "beta": settings.per_importance_beta,
        }
    # SACConfig.validate accepts only RLlib's buffer names; ROERSAC swaps in the ROER
    # subclass of this type when the buffer is built.
    return {
        "type": f"{prefix}PrioritizedEpisodeReplayBuffer",
        "capacity": capacity,
        "alpha": 1.0,
        "beta": 0.0,
    }


class ROERSAC(SAC):
    """RLlib's SAC whose prioritized buffer is the ROER (EMA) subclass for KL/JS."""

    def _create_local_replay_buffer_if_necessary(self, config):
        buffer = super()._create_local_replay_buffer_if_necessary(config)
        roer = self.config.learner_config_dict.get(ROER_CONFIG_KEY, {})
        if roer.get("per_type") not in ("KL", "JS"):
            return buffer
        buffer_config = dict(config["replay_buffer_config"])
        multi_agent = buffer_config.pop("type").startswith("MultiAgent")
        buffer_class = (
            ROERMultiAgentPrioritizedEpisodeReplayBuffer
            if multi_agent
            else ROERPrioritizedEpisodeReplayBuffer
        )
        return buffer_class(per_beta=roer["per_beta"], **buffer_config)


def _module_spec(settings: ROERSettings) -> RLModuleSpec:
    return RLModuleSpec(
        module_class=ROERSACTorchRLModule,
        model_config={
            **vars(
                DefaultModelConfig(
                    fcnet_hiddens=list(settings.hiddens),
                    fcnet_activation=settings.activation,
                )
            ),
            "value_hiddens": list(settings.hiddens),
            "value_activation": settings.activation,
        },
    )


def _base_config(settings: ROERSettings, env: EnvHandle, seed: int | None) -> SACConfig:
    roer = {
        key: getattr(settings, key)
        for key in (
            "per_type",
            "temp",
            "min_clip",
            "max_clip",
            "gumbel_max_clip",
            "js_min_weight",
            "js_max_weight",
            "per_beta",
            "std_normalize",
        )
    }
    config = (
        SACConfig(algo_class=ROERSAC)
        .environment(env.register_with_rllib(), env_config=dict(env.env_args))
        .env_runners(
            num_env_runners=settings.num_env_runners,
            num_envs_per_env_runner=settings.num_envs_per_env_runner,
            rollout_fragment_length=settings.rollout_fragment_length,
        )
        .learners(
            num_learners=settings.num_learners,
            num_gpus_per_learner=settings.num_gpus_per_learner,
            learner_class=ROERSACLearner,
            learner_config_dict={ROER_CONFIG_KEY: roer},
        )
        .training(
            gamma=settings.gamma,
            actor_lr=settings.actor_lr,
            critic_lr=settings.critic_lr,
            alpha_lr=settings.alpha_lr,
            tau=settings.tau,
            initial_alpha=settings.initial_alpha,
            n_step=settings.n_step,
            twin_q=settings.twin_q,
            train_batch_size_per_learner=settings.train_batch_size,
            num_steps_sampled_before_learning_starts=(
                settings.num_steps_sampled_before_learning_starts
            ),
            training_intensity=settings.training_intensity,
            replay_buffer_config=_replay_buffer_config(settings, env.is_multi_agent),
        )
        .debugging(seed=seed)
    )
    return config


def build_sac_roer(
    settings: ROERSettings, env: EnvHandle, share_policy: str, seed: int | None
) -> SACConfig:
    """SAC with ROER replay on a single-agent gymnasium env."""
    if env.is_multi_agent:
        raise ConfigError(f"{env.name!r} is multi-agent; sac_roer is single-agent (use isac_roer)")
    return _base_config(settings, env, seed).rl_module(rl_module_spec=_module_spec(settings))


def build_isac_roer(
    settings: ROERSettings, env: EnvHandle, share_policy: str, seed: int | None
) -> SACConfig:
    """Independent SAC with ROER replay: one SAC module per policy of the sharing mode,
    each with its own priorities in RLlib's multi-agent buffer."""
    from marllib_ext.algos.ppo_family import _policy_mapping

    if not env.is_multi_agent:
        raise ConfigError(f"{env.name!r} is a single-agent env; use sac_roer")
    mapping = _policy_mapping(env, share_policy)
    for agent in env.layout.agents:
        if not isinstance(env.layout.action_spaces[agent], gym.spaces.Box | gym.spaces.Discrete):
            raise ConfigError(f"agent {agent!r}: isac_roer needs Box or Discrete actions")
    policies = sorted(set(mapping.values()))
    return (
        _base_config(settings, env, seed)
        .multi_agent(policies=set(policies), policy_mapping_fn=PolicyMappingFn(mapping))
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={pid: _module_spec(settings) for pid in policies}
            )
        )
    )
