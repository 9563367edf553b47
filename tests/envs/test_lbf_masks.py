"""LBF's legal actions as action masks (``--env-arg action_masks=true``)."""

import numpy as np
import pytest

from marllib_ext import algos, make_env
from marllib_ext.envs.tuple_agents import make_tuple_agents_env
from marllib_ext.errors import ConfigError

pytest.importorskip("lbforaging", reason="the lbf extra is not installed")
from lbforaging.foraging.environment import Action  # noqa: E402

TASK = "Foraging-8x8-2p-2f-coop-v3"


def placed(env, positions, foods):
    """Puts the players at ``positions`` and food (level 1) at ``foods`` only, then
    lets LBF recompute its valid actions."""
    unwrapped = env.env.unwrapped
    unwrapped.field[:] = 0
    for row, col in foods:
        unwrapped.field[row, col] = 1
    for player, position in zip(unwrapped.players, positions, strict=True):
        player.position = position
    unwrapped._gen_valid_moves()
    return env.legal_actions()


def test_a_cornered_agent_may_not_walk_into_walls_or_load_without_food():
    env = make_tuple_agents_env("lbf", TASK, action_masks=True)
    env.reset(seed=0)
    corner, beside_food = placed(env, [(0, 0), (4, 4)], foods=[(4, 5)])
    np.testing.assert_array_equal(corner, [1, 0, 1, 0, 1, 0])  # none, south, east
    # Food east of the second agent: no step onto it, a load is legal.
    np.testing.assert_array_equal(beside_food, [1, 1, 1, 1, 0, 1])


def test_masks_match_lbf_valid_actions_at_every_step():
    env = make_tuple_agents_env("lbf", TASK, action_masks=True)
    _, infos = env.reset(seed=3)
    rng = np.random.default_rng(0)
    unwrapped = env.env.unwrapped
    for _ in range(40):
        for index, agent in enumerate(env.possible_agents):
            player = unwrapped.players[index]
            slow = [float(unwrapped._is_valid_action(player, a)) for a in Action]
            np.testing.assert_array_equal(infos[agent]["action_mask"], slow)
        actions = {a: int(rng.choice(np.flatnonzero(infos[a]["action_mask"]))) for a in env.agents}
        _, _, _, _, infos = env.step(actions)
        if not env.agents:
            break


def test_masks_are_off_by_default_and_refused_for_rware_or_a_non_boolean():
    env = make_tuple_agents_env("lbf", TASK)
    _, infos = env.reset(seed=0)
    assert "action_mask" not in infos["agent_0"]
    assert not make_env(f"lbf:{TASK}").layout.has_action_masks
    assert make_env(f"lbf:{TASK}", action_masks=True).layout.has_action_masks
    with pytest.raises(ConfigError, match="action_masks must be true or false"):
        make_tuple_agents_env("lbf", TASK, action_masks="yes")
    with pytest.raises(ConfigError, match="only LBF"):
        make_tuple_agents_env("rware", "rware-tiny-2ag-v2", action_masks=True)


def test_a_masked_qmix_team_samples_from_arrays_and_only_takes_legal_actions(ray_session):
    env = make_env(f"lbf:{TASK}", action_masks=True)
    algorithm = (
        algos.get("qmix", "epymarl", num_envs_per_env_runner=2).rllib_config(env).build_algo()
    )
    try:
        runner = algorithm.env_runner
        # The masks ride in the observations, so the infos drop nothing the arrays need.
        assert runner.sampling_description() == "sampling: team episodes from arrays"
        episodes = runner.sample()
    finally:
        algorithm.stop()
    steps = 0
    for episode in episodes:
        length = episode.rewards.shape[0]
        rows = np.arange(length)[:, None]
        agents = np.arange(episode.actions.shape[1])[None, :]
        taken = episode.action_mask[:length][rows, agents, episode.actions]
        assert (taken == 1.0).all()
        # Loads only beside food: most steps of an untrained team leave LOAD out.
        assert episode.action_mask[:length, :, 5].mean() < 0.5
        steps += length
    assert len(episodes) >= 2 and steps > 0
