"""The jitted calls of a JaxMARL world (``envs.jaxmarl``): each world's key, the
vmapped reset and step with what one host copy moves (the world's ``_pack`` and
``_step_extras``), and the reset worlds' states put in place."""

from __future__ import annotations


def world_keys(key, worlds, episodes, ticks):
    """Every world's key: its index, episode number and step (0: its reset) folded
    into ``key``."""
    import jax

    return jax.vmap(world_key, in_axes=(None, 0, 0, 0))(key, worlds, episodes, ticks)


def world_key(key, world, episode, tick):
    """``key`` with a world's index, episode number and step (0: its reset) folded in."""
    import jax

    return jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, world), episode), tick)


def reset_worlds(world, key, worlds, episodes, ticks):
    import jax

    observations, states = jax.vmap(world.env.reset)(world_keys(key, worlds, episodes, ticks))
    return states, world._pack(observations, states)


def step_worlds(world, key, worlds, episodes, ticks, states, actions):
    import jax

    keys = world_keys(key, worlds, episodes, ticks)
    observations, states, rewards, dones, infos = jax.vmap(world.env.step_env)(
        keys, states, actions
    )
    extras = world._step_extras(states, rewards, dones, infos)
    packed = (*world._pack(observations, states), *extras)
    return states, packed


def replace_where(chosen, fresh, old):
    """``fresh`` where ``chosen`` (per world), ``old`` elsewhere, leaf by leaf."""
    import jax
    import jax.numpy as jnp

    def pick(new, previous):
        mask = chosen.reshape((-1,) + (1,) * (new.ndim - 1))
        return jnp.where(mask, new, previous)

    return jax.tree_util.tree_map(pick, fresh, old)
