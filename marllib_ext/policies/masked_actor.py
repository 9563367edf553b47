"""PPO-family actors for envs with action masks.

The env adapter hands every agent ``{"observation": x, "action_mask": m}``. These actors
build their networks on ``x`` alone and replace the logits of illegal actions with
:data:`marllib_ext.ops.masks.MASKED_LOGIT` after every forward pass, so RLlib's
categorical distribution, and with it sampling, log-probabilities, entropy, KL and the
PPO ratio, is the distribution over the legal actions.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns

from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY, has_action_mask
from marllib_ext.ops.masks import masked_logits
from marllib_ext.policies.budget_actor import BudgetTemperatureActor


def split_masked_batch(batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(action_mask, batch with OBS = the plain observation)``; the input is not changed.

    A batch whose observation is already plain (no mask) comes back with mask ``None``."""
    obs = batch[Columns.OBS]
    if not isinstance(obs, dict):
        return None, batch
    return obs[ACTION_MASK_KEY], {**batch, Columns.OBS: obs[OBSERVATION_KEY]}


class ActionMaskMixin:
    """Put before a PPO actor class: networks on the plain observation, masked logits."""

    def __init__(self, *args, observation_space: gym.Space | None = None, **kwargs) -> None:
        if observation_space is not None and not has_action_mask(observation_space):
            raise ValueError(
                f"{type(self).__name__} needs observations with an action mask, got "
                f"{observation_space}"
            )
        # Before nn.Module.__init__, torch refuses plain attribute assignment.
        object.__setattr__(self, "_masked_space", observation_space)
        plain = None if observation_space is None else observation_space[OBSERVATION_KEY]
        super().__init__(*args, observation_space=plain, **kwargs)

    def setup(self) -> None:
        super().setup()  # the networks see the plain observation space
        if self._masked_space is not None:
            self.observation_space = self._masked_space

    def _masked(self, output: dict[str, Any], mask) -> dict[str, Any]:
        if mask is not None:
            logits = output[Columns.ACTION_DIST_INPUTS]
            output[Columns.ACTION_DIST_INPUTS] = masked_logits(logits, mask.to(logits.dtype))
        return output

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        mask, batch = split_masked_batch(batch)
        return self._masked(super()._forward(batch, **kwargs), mask)

    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        mask, batch = split_masked_batch(batch)
        return self._masked(super()._forward_train(batch, **kwargs), mask)

    def compute_values(self, batch: dict[str, Any], embeddings=None):
        _, batch = split_masked_batch(batch)
        return super().compute_values(batch, embeddings)


class MaskedPPOActor(ActionMaskMixin, DefaultPPOTorchRLModule):
    """RLlib's default PPO actor (MLP encoder, pi and value heads) with action masks."""


class MaskedBudgetTemperatureActor(ActionMaskMixin, BudgetTemperatureActor):
    """EFX's budget-temperature actor with action masks: the temperature scales the
    logits first, the mask then replaces the illegal ones."""


MASKED_ACTOR_OF = {
    DefaultPPOTorchRLModule: MaskedPPOActor,
    BudgetTemperatureActor: MaskedBudgetTemperatureActor,
}


def masked_actor_class(base: type) -> type:
    """The masked variant of a PPO actor class."""
    if base in MASKED_ACTOR_OF.values() or getattr(base, "handles_action_masks", False):
        return base
    if getattr(base, "masked_variant", None) is not None:  # declared by the class itself
        return base.masked_variant
    try:
        return MASKED_ACTOR_OF[base]
    except KeyError:
        raise ValueError(f"no action-masked variant of actor class {base.__name__}") from None


def with_masked_actors(config, algorithm: str):
    """``config`` (an ``AlgorithmConfig`` with a multi-module spec) with every actor
    module replaced by its masked variant; learner-only modules (critics, mixers) keep
    theirs. Raises ``ValueError`` naming ``algorithm`` when an actor has no masked
    variant."""
    import dataclasses

    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

    specs = dict(config.rl_module_spec.rl_module_specs)  # completed copies
    for module_id, spec in specs.items():
        if spec.learner_only:
            continue
        try:
            module_class = masked_actor_class(spec.module_class)
        except ValueError:
            raise ValueError(
                f"{algorithm} does not support action masks yet (its actor module "
                f"{module_id!r} is a {spec.module_class.__name__})"
            ) from None
        specs[module_id] = dataclasses.replace(spec, module_class=module_class)
    return config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
