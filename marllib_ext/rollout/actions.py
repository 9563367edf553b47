"""Actions of a batched rollout: uniformly random ones (RLlib's ``random_actions``
sampling) and the env's form of the module's (``NormalizeAndClipActions``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from marllib_ext.ops.rollout import clip_actions, unsquash_actions


def uniform_actions(
    space: gym.Space, num_envs: int, rng: np.random.Generator, mask: np.ndarray | None = None
) -> np.ndarray:
    """``(B, ...)`` uniform actions of ``space``; discrete ones uniform over the legal
    actions where ``mask`` (``(B, n)``) is given; unbounded boxes draw in [-1, 1]."""
    if isinstance(space, gym.spaces.Discrete):
        scores = rng.random((num_envs, space.n))
        if mask is not None:
            scores = np.where(mask > 0, scores, -1.0)
        return space.start + scores.argmax(axis=1)
    if isinstance(space, gym.spaces.Box):
        low = np.where(np.isfinite(space.low), space.low, -1.0)
        high = np.where(np.isfinite(space.high), space.high, 1.0)
        return rng.uniform(low, high, (num_envs, *space.shape)).astype(space.dtype)
    raise TypeError(f"random actions for a {type(space).__name__} action space")


def env_actions(
    actions: dict[str, np.ndarray], spaces: dict[str, gym.Space], config
) -> dict[str, np.ndarray]:
    """Each agent's ``(B, ...)`` actions as the env takes them: continuous ones
    unsquashed into the box (``config.normalize_actions``, bounded boxes) or clipped to
    it (``config.clip_actions``)."""
    out = {}
    change = config.normalize_actions or config.clip_actions
    for agent, action in actions.items():
        space = spaces[agent]
        if isinstance(space, gym.spaces.Box) and change:
            if config.normalize_actions and space.is_bounded():
                action = unsquash_actions(action, space.low, space.high)
            else:
                action = clip_actions(action, space.low, space.high)
            action = action.astype(space.dtype, copy=False)
        out[agent] = action
    return out
