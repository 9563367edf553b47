"""Batched rollouts for natively batched envs (VMAS): ``(T, B, ...)`` arrays sampled with
one forward pass per step for every world, turned into RLlib episodes once per call."""

from marllib_ext.rollout.blocks import clip_actions, episode_pieces, unsquash_actions

__all__ = ["clip_actions", "episode_pieces", "unsquash_actions"]
