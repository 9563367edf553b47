"""Batched rollouts for natively batched envs (VMAS, SMAX): ``(T, B, ...)`` arrays sampled
with one forward pass per step for every world, turned into RLlib episodes once per
call."""
