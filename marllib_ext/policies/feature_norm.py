"""HARL's ``use_feature_normalization``: a LayerNorm on a network's input features
(learned scale and shift), for RLlib's PPO actor modules."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from torch import nn


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


class FeatureNormActor(FeatureNormMixin, DefaultPPOTorchRLModule):
    """RLlib's default PPO module on layer-normalized observations."""


def with_feature_norm_actors(config, algorithm: str):
    """``config`` with every actor module (RLlib's default PPO module) replaced by
    :class:`FeatureNormActor`; learner-only modules keep theirs. Raises ``ValueError``
    naming ``algorithm`` when an actor is another class."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

    specs = dict(config.rl_module_spec.rl_module_specs)
    for module_id, spec in specs.items():
        if spec.learner_only:
            continue
        if spec.module_class not in (None, DefaultPPOTorchRLModule):
            raise ValueError(
                f"{algorithm} does not support feature_norm yet (its actor module "
                f"{module_id!r} is a {spec.module_class.__name__})"
            )
        specs[module_id] = dataclasses.replace(spec, module_class=FeatureNormActor)
    return config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
