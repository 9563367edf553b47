"""ops.rollout: the pure functions of a batched rollout block, against slow references
and literals."""

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.utils.spaces.space_utils import clip_action, unsquash_action

from marllib_ext.ops.rollout import clip_actions, episode_pieces, team_step_costs, unsquash_actions


def pieces_by_loop(ended):
    """Walks every world's steps and cuts after each ended one."""
    horizon, num_worlds = ended.shape
    out = []
    for world in range(num_worlds):
        start = 0
        for t in range(horizon):
            if ended[t, world]:
                out.append((world, start, t + 1, True))
                start = t + 1
        if start < horizon:
            out.append((world, start, horizon, False))
    return out


def test_literal_block():
    ended = np.zeros((5, 3), bool)
    ended[1, 0] = ended[4, 0] = True  # world 0: two episodes end, none runs on
    ended[2, 2] = True  # world 2: one ends, the next runs on
    world, start, stop, done = episode_pieces(ended)
    assert world.tolist() == [0, 0, 1, 2, 2]
    assert start.tolist() == [0, 2, 0, 0, 3]
    assert stop.tolist() == [2, 5, 5, 3, 5]
    assert done.tolist() == [True, True, False, True, False]


@pytest.mark.parametrize("seed", range(20))
def test_matches_the_loop(seed):
    rng = np.random.default_rng(seed)
    ended = rng.random((int(rng.integers(1, 30)), int(rng.integers(1, 9)))) < rng.random()
    got = list(zip(*(a.tolist() for a in episode_pieces(ended)), strict=True))
    assert got == pieces_by_loop(ended)
    # Every step of every world lies in exactly one piece.
    covered = np.zeros(ended.shape, int)
    for world, start, stop, _ in got:
        covered[start:stop, world] += 1
    assert (covered == 1).all()


def test_rejects_a_flat_array():
    with pytest.raises(ValueError, match=r"\(T, B\)"):
        episode_pieces(np.zeros(4, bool))


def test_unsquash_and_clip_match_rllib_row_by_row():
    space = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    actions = np.random.default_rng(0).normal(0.0, 1.5, (64, 2)).astype(np.float32)
    unsquashed = unsquash_actions(actions, space.low, space.high)
    clipped = clip_actions(actions, space.low, space.high)
    for row in range(len(actions)):
        np.testing.assert_allclose(unsquashed[row], unsquash_action(actions[row], space), 1e-6)
        np.testing.assert_array_equal(clipped[row], clip_action(actions[row], space))
    # Literal: -1 -> low, 0 -> the middle, 1 -> high, beyond -> clipped.
    literal = np.array([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0], [3.0, -3.0]], np.float32)
    np.testing.assert_allclose(
        unsquash_actions(literal, space.low, space.high),
        [[-2.0, 0.0], [0.0, 0.5], [2.0, 1.0], [2.0, 0.0]],
    )


def _team_step_costs_loop(team_costs, observed, members):
    horizon, worlds, _ = team_costs.shape
    out = np.zeros((horizon, worlds))
    for t in range(horizon):
        for b in range(worlds):
            for j in members:
                if observed[t, b, j]:
                    out[t, b] = team_costs[t, b, j]
                    break
    return out


def test_team_step_costs_literal():
    # 3 steps, 1 world, agents 0-1 one team, agent 2 another.
    team_costs = np.array([[[2.0, 2.0, 5.0]], [[0.0, -1.5, 7.0]], [[9.0, 9.0, 0.0]]])
    observed = np.array([[[1, 1, 1]], [[0, 1, 0]], [[0, 0, 1]]], bool)
    np.testing.assert_array_equal(
        team_step_costs(team_costs, observed, [0, 1]), [[2.0], [-1.5], [0.0]]
    )
    np.testing.assert_array_equal(team_step_costs(team_costs, observed, [2]), [[5.0], [0.0], [0.0]])
    assert team_step_costs(team_costs, observed, []).shape == (3, 1)


@pytest.mark.parametrize("seed", range(4))
def test_team_step_costs_match_the_loop(seed):
    rng = np.random.default_rng(seed)
    team_costs = rng.normal(size=(7, 5, 4))
    observed = rng.random((7, 5, 4)) < 0.5
    for members in ([0, 1, 2, 3], [3, 1], [2]):
        np.testing.assert_array_equal(
            team_step_costs(team_costs, observed, members),
            _team_step_costs_loop(team_costs, observed, members),
        )
