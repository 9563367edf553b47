"""Options of RLlib's PPO actor module that the reference implementations rely on:
HARL's ``use_feature_normalization`` (a LayerNorm on the input features, learned scale
and shift) and HARL's bounded Gaussian std (``std = std_bound * sigmoid(p)`` for the
free parameter ``p``, instead of RLlib's ``std = exp(p)``; ``ops.gaussian``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from torch import nn

from marllib_ext.ops.gaussian import bounded_log_std

STD_BOUND_KEY = "std_bound"  # the actor's model_config entry


class FeatureNormMixin:
    """Put before a PPO actor class: its networks see ``LayerNorm(observation)``."""

    def setup(self) -> None:
        super().setup()
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise ValueError(
                f"feature_norm needs flat Box observations, got {self.observation_space}"
            )
        self.feature_norm = nn.LayerNorm(int(self.observation_space.shape[-1]))

    def normalized_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {**batch, Columns.OBS: self.feature_norm(batch[Columns.OBS])}

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return super()._forward(self.normalized_batch(batch), **kwargs)

    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return super()._forward_train(self.normalized_batch(batch), **kwargs)

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None):
        if embeddings is None:
            batch = self.normalized_batch(batch)
        return super().compute_values(batch, embeddings=embeddings)


class BoundedStdMixin:
    """Put before a PPO actor class with ``free_log_std``: the second half of its
    Gaussian inputs ``[mean, p]`` becomes ``log(std_bound * sigmoid(p))``, so RLlib's
    diagonal Gaussian (sampling, log-probs, entropy, KL) has ``std < std_bound``."""

    def setup(self) -> None:
        super().setup()
        if not isinstance(self.action_space, gym.spaces.Box) or not self.model_config.get(
            "free_log_std"
        ):
            raise ValueError("std_bound needs a Gaussian policy with free_log_std")
        self.std_bound = float(self.model_config[STD_BOUND_KEY])

    def _bounded(self, output: dict[str, Any]) -> dict[str, Any]:
        mean, raw = output[Columns.ACTION_DIST_INPUTS].chunk(2, dim=-1)
        log_std = bounded_log_std(raw, self.std_bound)
        output[Columns.ACTION_DIST_INPUTS] = torch.cat([mean, log_std], dim=-1)
        return output

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self._bounded(super()._forward(batch, **kwargs))

    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self._bounded(super()._forward_train(batch, **kwargs))


class FeatureNormActor(FeatureNormMixin, DefaultPPOTorchRLModule):
    """RLlib's default PPO module on layer-normalized observations."""


class BoundedStdActor(BoundedStdMixin, DefaultPPOTorchRLModule):
    """RLlib's default PPO module with a bounded Gaussian std."""


class FeatureNormBoundedStdActor(BoundedStdMixin, FeatureNormMixin, DefaultPPOTorchRLModule):
    """Both options."""


ACTOR_CLASSES = {
    (True, False): FeatureNormActor,
    (False, True): BoundedStdActor,
    (True, True): FeatureNormBoundedStdActor,
}


def with_actor_options(config, algorithm: str, *, feature_norm: bool, std_bound: float | None):
    """``config`` with every actor module (RLlib's default PPO module) replaced by the
    class carrying the options asked for (``std_bound`` goes into its model_config);
    learner-only modules keep theirs. Raises ``ValueError`` naming ``algorithm`` and the
    options asked for on a single-agent env or when an actor is another class."""
    options = (feature_norm, std_bound is not None)
    if not any(options):
        return config
    asked = " and ".join(
        n for n, on in zip(("feature_norm", "std_bound"), options, strict=True) if on
    )
    return with_actor_class(
        config, algorithm, asked, ACTOR_CLASSES[options], {STD_BOUND_KEY: std_bound}
    )


def with_actor_class(
    config, algorithm: str, asked: str, module_class: type, model_config: dict[str, Any]
):
    """``config`` with every actor module (RLlib's default PPO module) replaced by
    ``module_class``, ``model_config`` added to its model config; learner-only modules
    (critics, mixers) keep theirs. Raises ``ValueError`` naming ``algorithm`` and
    ``asked`` on a single-agent env or when an actor is another class."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

    if not isinstance(config.rl_module_spec, MultiRLModuleSpec):
        raise ValueError(f"{asked} on a single-agent env: not yet ({algorithm})")
    specs = dict(config.rl_module_spec.rl_module_specs)
    for module_id, spec in specs.items():
        if spec.learner_only:
            continue
        if spec.module_class not in (None, DefaultPPOTorchRLModule):
            raise ValueError(
                f"{algorithm} does not support {asked} yet (its actor module "
                f"{module_id!r} is a {spec.module_class.__name__})"
            )
        own = spec.model_config
        if dataclasses.is_dataclass(own):
            own = dataclasses.asdict(own)
        specs[module_id] = dataclasses.replace(
            spec, module_class=module_class, model_config={**(own or {}), **model_config}
        )
    return config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
