"""PPO-family actors with a convolutional encoder on grid observations (``encoder: cnn``).

The env hands out each grid flattened (``envs.grid_space.GridBox``); the actor builds
RLlib's default PPO networks on the ``(H, W, C)`` Box, so RLlib's catalog gives it its
CNN encoder (``conv_filters``: ``[channels, kernel, stride]`` per layer, "same"
padding, then flattened) and the pi and value heads (``head_fcnet_hiddens``), and it
reshapes every batch's flat observations ``(..., H*W*C)`` to ``(..., H, W, C)`` before
the forward pass."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns

from marllib_ext.envs.grid_space import grid_shape_of
from marllib_ext.policies.actor_options import with_actor_class
from marllib_ext.policies.masked_actor import ActionMaskMixin


class GridObservationMixin:
    """Put before a PPO actor class: networks on the ``(H, W, C)`` grid of a
    ``GridBox`` observation."""

    def __init__(self, *args, observation_space: gym.Space | None = None, **kwargs) -> None:
        grid = None if observation_space is None else grid_shape_of(observation_space)
        if observation_space is not None and grid is None:
            raise ValueError(
                f"{type(self).__name__} needs grid observations (a GridBox), got "
                f"{observation_space}"
            )
        # Before nn.Module.__init__, torch refuses plain attribute assignment.
        object.__setattr__(self, "_flat_space", observation_space)
        object.__setattr__(self, "grid_shape", grid)
        image = None if grid is None else gym.spaces.Box(-np.inf, np.inf, grid, np.float32)
        super().__init__(*args, observation_space=image, **kwargs)

    def setup(self) -> None:
        super().setup()  # the networks see the (H, W, C) Box
        if self._flat_space is not None:
            self.observation_space = self._flat_space

    def grid_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``batch`` with its observations ``(..., H*W*C)`` as ``(..., H, W, C)``."""
        flat = batch[Columns.OBS]
        return {**batch, Columns.OBS: flat.reshape(*flat.shape[:-1], *self.grid_shape)}

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return super()._forward(self.grid_batch(batch), **kwargs)

    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return super()._forward_train(self.grid_batch(batch), **kwargs)

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None):
        if embeddings is None:
            batch = self.grid_batch(batch)
        return super().compute_values(batch, embeddings=embeddings)


class MaskedGridPPOActor(ActionMaskMixin, GridObservationMixin, DefaultPPOTorchRLModule):
    """The grid actor with action masks: the mask is split off, then the grid rebuilt."""

    handles_action_masks = True


class GridPPOActor(GridObservationMixin, DefaultPPOTorchRLModule):
    """RLlib's default PPO module with its CNN encoder on grid observations."""

    masked_variant = MaskedGridPPOActor


def with_grid_encoders(config, algorithm: str, *, conv_filters, activation: str, hiddens):
    """``config`` with every actor module (RLlib's default PPO module) replaced by
    ``GridPPOActor`` with the conv layers ``conv_filters`` and heads of ``hiddens``
    units (``actor_options.with_actor_class``)."""
    grid_config = {
        "conv_filters": [list(layer) for layer in conv_filters],
        "conv_activation": activation,
        "head_fcnet_hiddens": list(hiddens),
        "head_fcnet_activation": activation,
    }
    return with_actor_class(config, algorithm, "encoder=cnn", GridPPOActor, grid_config)
