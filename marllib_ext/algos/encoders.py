"""The encoder settings (``encoder``, ``conv_filters``), their checks and the agents'
grids they read; the modules are ``policies.grid_actor``, ``joint_critic``, ``q_agent``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from marllib_ext.envs.grid_space import grid_shape_of
from marllib_ext.errors import ConfigError

if TYPE_CHECKING:
    from marllib_ext.envs.handle import EnvHandle

ENCODERS = ("mlp", "cnn")


def encoder_checks(encoder: str, conv_filters) -> list[tuple[bool, str, str]]:
    """``(holds, field, requirement)`` of each rule the encoder settings follow."""
    layers_ok = bool(conv_filters) and all(
        len(layer) == 3 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                for v in layer)
        for layer in conv_filters
    )  # fmt: skip
    return [
        (encoder in ENCODERS, "encoder", f"one of {ENCODERS}"),
        (layers_ok, "conv_filters", "a list of [channels, kernel, stride] of positive ints"),
    ]


def agent_grid_shapes(env: EnvHandle, agents) -> list[tuple[int, ...]]:
    """Each of ``agents``' observation grid ``(H, W, C)`` for ``encoder: cnn``;
    ``ConfigError`` naming the agents whose observations are flat vectors."""
    grids = {a: grid_shape_of(env.layout.plain_observation_space(a)) for a in agents}
    flat = sorted(a for a, grid in grids.items() if grid is None)
    if not grids or flat:
        raise ConfigError(
            f"encoder: cnn needs grid observations (a GridBox, as jaxmarl:overcooked hands "
            f"out); env {env.name!r} gives {', '.join(flat) or 'its agent'} flat vectors"
        )
    return [grids[a] for a in agents]
