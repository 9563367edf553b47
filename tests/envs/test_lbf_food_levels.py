"""LBF's food levels drawn as lbforaging 1.x drew them (``--env-arg food_levels=v1``)."""

import numpy as np
import pytest

from marllib_ext import make_env
from marllib_ext.envs.tuple_agents import draw_v1_food_levels, make_tuple_agents_env
from marllib_ext.errors import ConfigError

pytest.importorskip("lbforaging", reason="the lbf extra is not installed")

TASK = "Foraging-10x10-3p-3f-v3"


def food_and_bounds(food_levels: str, task: str = TASK, resets: int = 300):
    """Each reset's food levels and ``L``, the sum of the three lowest player levels."""
    env = make_tuple_agents_env("lbf", task, food_levels=food_levels)
    unwrapped = env.env.unwrapped
    draws = []
    for seed in range(resets):
        env.reset(seed=seed)
        bound = sum(sorted(p.level for p in unwrapped.players)[:3])
        foods = unwrapped.field[unwrapped.field > 0]
        assert unwrapped._food_spawned == foods.sum()  # the rewards' normalizer
        draws.append((foods, bound))
    return draws


def test_v1_never_draws_a_food_at_the_players_summed_level_and_v3_does():
    v1 = food_and_bounds("v1")
    v3 = food_and_bounds("v3")
    assert all(((foods >= 1) & (foods <= bound - 1)).all() for foods, bound in v1)
    assert all(((foods >= 1) & (foods <= bound)).all() for foods, bound in v3)
    at_bound = sum(int((foods == bound).sum()) for foods, bound in v3)
    assert at_bound > 0.1 * sum(len(foods) for foods, _ in v3)
    # Every level of [1, L - 1] comes up under v1: the range shrank by one, no more.
    seen = {(bound, int(level)) for foods, bound in v1 for level in foods}
    for bound in {bound for _, bound in v1}:
        assert {level for b, level in seen if b == bound} == set(range(1, bound))


def test_the_upper_bound_drops_by_one_and_never_below_the_lower_bound():
    calls = []

    class Recorder:
        force_coop = False

        def spawn_food(self, max_num_food, min_levels, max_levels):
            calls.append(np.asarray(max_levels).tolist())

    recorder = Recorder()
    draw_v1_food_levels(recorder)
    recorder.spawn_food(3, np.array([1, 1, 2]), np.array([5, 1, 2]))
    recorder.force_coop = True
    recorder.spawn_food(3, np.array([1, 1, 1]), np.array([5, 5, 5]))
    assert calls == [[4, 1, 2], [5, 5, 5]]


def test_coop_layouts_are_the_same_under_both_rules():
    task = "Foraging-8x8-2p-2f-coop-v3"
    v1 = food_and_bounds("v1", task, resets=20)
    v3 = food_and_bounds("v3", task, resets=20)
    for (foods_v1, bound), (foods_v3, _) in zip(v1, v3, strict=True):
        np.testing.assert_array_equal(foods_v1, foods_v3)
        assert (foods_v1 == bound).all()


def test_the_setting_reaches_the_env_through_make_env_and_bad_values_are_refused():
    adapter = make_env(f"lbf:{TASK}", food_levels="v1").make_rllib_env()
    foraging = adapter.par_env.env.unwrapped
    for seed in range(30):
        adapter.reset(seed=seed)
        bound = sum(sorted(p.level for p in foraging.players)[:3])
        assert foraging.field.max() <= bound - 1
    with pytest.raises(ConfigError, match="food_levels must be one of"):
        make_tuple_agents_env("lbf", TASK, food_levels="v2")
    with pytest.raises(ConfigError, match="food_levels: only LBF"):
        make_tuple_agents_env("rware", "rware-tiny-2ag-v2", food_levels="v1")
