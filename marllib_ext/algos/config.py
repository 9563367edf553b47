"""Typed, validated hyperparameters: the merged values of an algorithm's YAML files
(``configs.algo_files``) must match its settings dataclass exactly; an unknown key or
a value of the wrong type is an error that names the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from marllib_ext.algos.encoders import encoder_checks
from marllib_ext.errors import ConfigError
from marllib_ext.policies.joint_critic import ACTIVATIONS
from marllib_ext.policies.vd_critic import MIXERS

ACTIVATION_NAMES = tuple(ACTIVATIONS)
Check = tuple[bool, str, str]  # (ok, config key, message when not ok)


def require(ok: bool, key: str, value: Any, message: str) -> None:
    """Raises a ``ConfigError`` naming ``key`` and its value when ``ok`` is false."""
    if not ok:
        raise ConfigError(f"config key {key!r} = {value!r}: {message}")


# How an SGD step's minibatch splits over module batches of different sizes
# (PPOSettings.module_minibatches; rllib_compat.EqualPassesMinibatches).
MODULE_MINIBATCHES = ("same_rows", "equal_passes")


def require_all(settings: Any, checks: list[Check]) -> None:
    """``require`` for each ``(ok, key, message)``, the value read from ``settings``."""
    for ok, key, message in checks:
        require(ok, key, getattr(settings, key), message)


def learner_share(total: int | None, num_learners: int) -> int | None:
    """One learner's share of an iteration-wide row count: ``total / max(1, num_learners)``.

    ``train_batch_size`` (and ``minibatch_size``) mean rows of the whole iteration
    whatever the number of learners; RLlib's ``*_per_learner`` settings get this share,
    so ``num_learners`` data-parallel learners together see the same batch and take the
    same number of gradient steps (each averaged over their shards) as one learner.
    ``None`` stays ``None``. The settings' checks make ``total`` divisible."""
    return None if total is None else total // max(1, num_learners)


def divisible_by_learners(settings: Any, *keys: str) -> list[Check]:
    """Checks that each of ``keys`` (a row count or ``None``) splits evenly over
    ``settings.num_learners``."""
    learners = max(1, settings.num_learners)
    return [
        (
            getattr(settings, key) is None or getattr(settings, key) % learners == 0,
            key,
            f"must be divisible by num_learners={settings.num_learners} (each learner "
            "takes an equal share of the iteration's rows)",
        )
        for key in keys
    ]


@dataclass(frozen=True)
class Settings:
    """Base of every settings class: typed fields from YAML, validated once.

    A class (or a field mixin) validates its own fields in ``checks()``, returning
    ``(ok, key, message)`` triples; ``__post_init__`` runs the ``checks`` of every class
    in the MRO, so mixins may be listed in any order and never call ``super()``.
    """

    # Keys no phase of the algorithm reads (set by the registry, never from YAML): they
    # keep their inherited values unchecked; a user's value for one is refused earlier.
    ignored_keys: tuple[str, ...] = dataclasses.field(
        default=(), kw_only=True, metadata={"set_by_registry": True}
    )
    # Evaluation during training (``algos.evaluation``): every
    # evaluation_interval iterations (null: never), evaluation_duration episodes on
    # RLlib's evaluation runner, greedy unless evaluation_explore.
    evaluation_interval: int | None = dataclasses.field(default=None, kw_only=True)
    evaluation_duration: int = dataclasses.field(default=32, kw_only=True)
    evaluation_explore: bool = dataclasses.field(default=False, kw_only=True)
    # Every evaluation_video_interval-th evaluation also renders one episode to a GIF
    # (run dir videos/, TensorBoard, W&B, MLflow); null: no videos.
    evaluation_video_interval: int | None = dataclasses.field(default=None, kw_only=True)
    # Episodes of the end-of-run re-evaluation of the best evaluation's policy (marl-eval's
    # absolute metrics); null: ten times evaluation_duration; 0: none.
    evaluation_final_episodes: int | None = dataclasses.field(default=None, kw_only=True)
    # EFX algorithms: at the end of the run, the same policy and episodes as the
    # re-evaluation (evaluation_duration episodes when that is off) played from each of
    # these budgets, given as fractions of [z_low, z_high] (metrics.json budget_points).
    evaluation_budgets: list[float] | None = dataclasses.field(default=None, kw_only=True)

    def checks(self) -> list[Check]:
        return [
            (
                self.evaluation_budgets is None
                or (
                    len(self.evaluation_budgets) > 0
                    and all(0.0 <= f <= 1.0 for f in self.evaluation_budgets)
                ),
                "evaluation_budgets",
                "must be a non-empty list of fractions of [z_low, z_high], each in [0, 1], or null",
            ),
            (
                self.evaluation_video_interval is None
                or (self.evaluation_video_interval > 0 and self.evaluation_interval),
                "evaluation_video_interval",
                "must be > 0 or null, and needs evaluation_interval (videos of evaluations)",
            ),
            (
                self.evaluation_interval is None or self.evaluation_interval > 0,
                "evaluation_interval",
                "must be > 0 or null (no evaluation)",
            ),
            (self.evaluation_duration > 0, "evaluation_duration", "must be > 0"),
            (
                self.evaluation_final_episodes is None or self.evaluation_final_episodes >= 0,
                "evaluation_final_episodes",
                "must be >= 0 (0: no end-of-run re-evaluation) or null",
            ),
        ]

    def __post_init__(self) -> None:
        for cls in reversed(type(self).__mro__):
            own_checks = cls.__dict__.get("checks")
            if own_checks is not None:
                checks = own_checks(self)
                require_all(self, [c for c in checks if c[1] not in self.ignored_keys])


@dataclass(frozen=True)
class PPOSettings(Settings):
    """PPO core (seed 001) plus sampling settings; every field comes from YAML.

    ``vf_clip_param``: RLlib's PPO clamps each value loss term at this value; ``null``
    leaves it unclamped (the joint critics' default: team returns are tens of units,
    and a clamped squared error has no gradient)."""

    lr: float
    gamma: float
    lambda_: float
    clip_param: float
    entropy_coeff: float
    vf_loss_coeff: float
    vf_clip_param: float | None
    use_kl_loss: bool
    kl_coeff: float
    kl_target: float
    grad_clip: float | None
    train_batch_size: int
    minibatch_size: int | None  # null: one step on the whole batch per epoch
    num_epochs: int
    module_minibatches: str  # same_rows | equal_passes (_ppo.yaml)
    num_env_runners: int
    num_envs_per_env_runner: int
    num_cpus_per_env_runner: float
    num_learners: int
    num_gpus_per_learner: float
    actor_hiddens: list[int]
    actor_activation: str
    vf_share_layers: bool
    free_log_std: bool
    # HARL's use_orthogonal: orthogonal weights (gain by activation, action head
    # action_head_gain, value heads 1), zero biases; and a Gaussian's initial std.
    orthogonal_init: bool
    action_head_gain: float
    initial_std: float | None  # null: RLlib's 1.0
    # HARL's Gaussian: std = std_bound * sigmoid(p) for the free parameter p; null:
    # RLlib's std = exp(p), unbounded.
    std_bound: float | None
    feature_norm: bool  # HARL's use_feature_normalization: LayerNorm on the inputs
    # The actors' encoder: mlp (actor_hiddens on the flat observation) or cnn (conv
    # layers [channels, kernel, stride] on grid observations, then actor_hiddens heads;
    # with use_rnn the GRU or LSTM between the conv layers and the heads).
    encoder: str
    conv_filters: list[list[int]]
    # Recurrent actors (rMAPPO): a GRU or LSTM layer of rnn_hidden_dim units after the
    # MLP, trained on sequences of at most max_seq_len steps (the data chunks).
    use_rnn: bool
    rnn_type: str
    rnn_hidden_dim: int
    max_seq_len: int

    def checks(self) -> list[Check]:
        return [
            (self.lr > 0, "lr", "must be > 0"),
            (self.rnn_type in ("gru", "lstm"), "rnn_type", "one of ('gru', 'lstm')"),
            (self.rnn_hidden_dim > 0, "rnn_hidden_dim", "must be > 0"),
            (self.max_seq_len > 0, "max_seq_len", "must be > 0"),
            (0 <= self.gamma <= 1, "gamma", "must be in [0, 1]"),
            (0 <= self.lambda_ <= 1, "lambda_", "must be in [0, 1]"),
            (self.clip_param > 0, "clip_param", "must be > 0"),
            (
                self.vf_clip_param is None or self.vf_clip_param > 0,
                "vf_clip_param",
                "must be > 0 or null",
            ),
            (self.train_batch_size > 0, "train_batch_size", "must be > 0"),
            (
                self.minibatch_size is None or 0 < self.minibatch_size <= self.train_batch_size,
                "minibatch_size",
                f"must be in (0, train_batch_size={self.train_batch_size}] or null",
            ),
            (self.num_epochs > 0, "num_epochs", "must be > 0"),
            (
                self.module_minibatches in MODULE_MINIBATCHES,
                "module_minibatches",
                f"one of {MODULE_MINIBATCHES}",
            ),
            (self.num_env_runners >= 0, "num_env_runners", "must be >= 0"),
            (self.num_envs_per_env_runner > 0, "num_envs_per_env_runner", "must be > 0"),
            (self.num_cpus_per_env_runner > 0, "num_cpus_per_env_runner", "must be > 0"),
            (self.num_learners >= 0, "num_learners", "must be >= 0 (0: learn in the driver)"),
            (self.num_gpus_per_learner >= 0, "num_gpus_per_learner", "must be >= 0"),
            *divisible_by_learners(self, "train_batch_size", "minibatch_size"),
            (
                self.minibatch_size is not None or self.num_learners <= 1 or self.num_epochs == 1,
                "minibatch_size",
                "null (whole-batch steps) with num_learners > 1 needs num_epochs: 1",
            ),
            (
                self.actor_activation in ACTIVATION_NAMES,
                "actor_activation",
                f"one of {ACTIVATION_NAMES}",
            ),
            (self.action_head_gain > 0, "action_head_gain", "must be > 0"),
            *encoder_checks(self.encoder, self.conv_filters),
            (
                self.initial_std is None or (self.initial_std > 0 and self.free_log_std),
                "initial_std",
                "must be > 0 or null, and needs free_log_std (a Gaussian's own log std)",
            ),
            (
                self.std_bound is None or (self.std_bound > 0 and self.free_log_std),
                "std_bound",
                "must be > 0 or null, and needs free_log_std (a Gaussian's own log std)",
            ),
            (
                None in (self.std_bound, self.initial_std) or self.initial_std < self.std_bound,
                "initial_std",
                f"must be below std_bound={self.std_bound}",
            ),
        ]


@dataclass(frozen=True)
class CentralCriticSettings(PPOSettings):
    """PPO settings plus the joint critic network, its own learning rate and its value
    loss: value
    normalization (HARL's ``use_valuenorm``), a Huber error (``huber_delta``; null:
    squared) and a loss clipped around the sampled values (``value_clip``; null: off)."""

    critic_hiddens: list[int]
    critic_activation: str
    critic_lr: float | None  # the joint critics' optimizer (HARL's critic_lr); null: lr
    critic_use_rnn: bool  # rMAPPO's critic: rnn_type / rnn_hidden_dim / max_seq_len
    value_norm: bool
    value_norm_beta: float
    huber_delta: float | None
    value_clip: float | None

    def checks(self) -> list[Check]:
        return [
            (
                self.critic_activation in ACTIVATION_NAMES,
                "critic_activation",
                f"one of {ACTIVATION_NAMES}",
            ),
            (self.critic_lr is None or self.critic_lr > 0, "critic_lr", "must be > 0 or null"),
            (0 < self.value_norm_beta < 1, "value_norm_beta", "must be in (0, 1)"),
            (
                self.huber_delta is None or self.huber_delta > 0,
                "huber_delta",
                "must be > 0 or null",
            ),
            (self.value_clip is None or self.value_clip > 0, "value_clip", "must be > 0 or null"),
        ]


@dataclass(frozen=True)
class VDSettings(CentralCriticSettings):
    """Joint-critic settings plus the value-decomposition mixer."""

    mixer: str
    mixer_embed_dim: int
    hypernet_embed_dim: int

    def checks(self) -> list[Check]:
        return [
            (
                not self.value_norm,
                "value_norm",
                "the value-decomposition critic's mixed V_tot is not normalized yet: false",
            ),
            (
                not self.feature_norm,
                "feature_norm",
                "the value-decomposition critic's inputs are not normalized yet: false",
            ),
            (self.mixer in MIXERS, "mixer", f"one of {MIXERS}"),
            (self.mixer_embed_dim >= 1, "mixer_embed_dim", "must be >= 1"),
            (self.hypernet_embed_dim >= 1, "hypernet_embed_dim", "must be >= 1"),
        ]


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """Checks ``value`` against ``annotation``; ints are accepted for floats."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(key, value, option)
            except ConfigError:
                continue
    elif origin is list:
        (item_type,) = typing.get_args(annotation)
        if isinstance(value, list | tuple):
            return [_coerce(f"{key}[{i}]", item, item_type) for i, item in enumerate(value)]
    elif annotation is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is bool or annotation is str:
        if isinstance(value, annotation):
            return value
    else:
        raise TypeError(f"unsupported config annotation {annotation!r} for {key!r}")
    raise ConfigError(
        f"config key {key!r} must be {_type_name(annotation)}, got {value!r} "
        f"({type(value).__name__})"
    )


def build_settings(
    settings_class: type,
    values: dict[str, Any],
    *,
    source: str,
    ignored_keys: tuple[str, ...] = (),
) -> Any:
    """Validates ``values`` against the dataclass ``settings_class`` and builds it;
    ``ignored_keys`` (keys no phase of the algorithm reads) are not checked."""
    fields = {f.name: f for f in dataclasses.fields(settings_class)}
    hints = typing.get_type_hints(settings_class)
    for key in values:
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown config key {key!r} in {source}{hint}")
        if fields[key].metadata.get("set_by_registry"):
            raise ConfigError(f"config key {key!r} in {source} cannot be set")
        if fields[key].metadata.get("derived_from_env"):
            raise ConfigError(
                f"config key {key!r} in {source} is derived from the env and cannot be set"
            )
    missing = [
        name
        for name, f in fields.items()
        if name not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{source} is missing config keys: {', '.join(missing)}")
    coerced = {key: _coerce(key, value, hints[key]) for key, value in values.items()}
    return settings_class(**coerced, ignored_keys=tuple(ignored_keys))


def gaussian_only_settings(settings: Any, env: Any) -> Any:
    """``free_log_std`` (a state-independent log std), and with it ``initial_std`` and
    ``std_bound``, is a Gaussian's: off where no agent has continuous actions, so a
    family default (vmas) also fits its discrete tasks."""
    if not getattr(settings, "free_log_std", False) or not env.is_multi_agent:
        return settings
    spaces = env.layout.action_spaces.values()
    if any(isinstance(space, gym.spaces.Box) for space in spaces):
        return settings
    return dataclasses.replace(settings, free_log_std=False, initial_std=None, std_bound=None)
