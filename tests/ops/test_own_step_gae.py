"""own_step_gae: one agent's GAE over its own steps, against a slow per-episode
reference, against block_gae where it acts every step, and by hand on turns."""

import numpy as np
import pytest

from marllib_ext.ops import block_gae, own_step_gae


def slow_own_step_gae(rewards, values, next_values, present, observed_after, terminated,
                      truncated, died, gamma, lambda_):  # fmt: skip
    """Per world: cut the column into episodes, list the agent's own steps in each,
    sum the rewards of each step's span, then the textbook recursion per episode."""
    horizon, worlds = values.shape
    advantages = np.zeros((horizon, worlds))
    for b in range(worlds):
        start = 0
        for t in range(horizon):
            if not (terminated[t, b] or truncated[t, b] or t == horizon - 1):
                continue
            episode = range(start, t + 1)
            start = t + 1
            acts = [s for s in episode if present[s, b]]
            death = next((s for s in acts if died[s, b]), None)
            if death is not None:
                acts = [s for s in acts if s <= death]
            steps = []  # (t_j, R_j, V'_j, terminal_j, ends_j)
            for j, t_j in enumerate(acts):
                following = acts[j + 1] if j + 1 < len(acts) else None
                last = death if t_j == death else (following - 1 if following else t)
                span = range(t_j, last + 1)
                reward = sum(rewards[s, b] for s in span)
                seen = [s for s in span if observed_after[s, b]]
                bootstrap = next_values[seen[-1], b] if seen else 0.0
                terminal = following is None and bool(died[last, b] or terminated[last, b])
                if following is not None and not seen:
                    bootstrap = values[following, b]
                steps.append((t_j, reward, bootstrap, terminal, following is None))
            running = 0.0
            for t_j, reward, bootstrap, terminal, ends in reversed(steps):
                delta = reward + gamma * (0.0 if terminal else bootstrap) - values[t_j, b]
                running = delta + gamma * lambda_ * (0.0 if ends else running)
                advantages[t_j, b] = running
    return advantages


def random_turns(rng, horizon=16, worlds=6):
    """Agents that act on some steps only (turns, arrivals), die, and episodes that end."""
    present = rng.random((horizon, worlds)) < 0.6
    ends = rng.random((horizon, worlds)) < 0.15
    terminated = ends & (rng.random((horizon, worlds)) < 0.5)
    truncated = ends & ~terminated
    died = present & (rng.random((horizon, worlds)) < 0.1) & ~ends
    # After a death the agent is gone until its episode ends.
    for b in range(worlds):
        gone = False
        for t in range(horizon):
            if gone:
                present[t, b] = died[t, b] = False
            gone = (gone or died[t, b]) and not ends[t, b]
    observed_after = rng.random((horizon, worlds)) < 0.7
    return dict(
        rewards=rng.normal(size=(horizon, worlds)),
        values=rng.normal(size=(horizon, worlds)),
        next_values=rng.normal(size=(horizon, worlds)),
        present=present,
        observed_after=observed_after,
        terminated=terminated,
        truncated=truncated,
        died=died,
    )


@pytest.mark.parametrize("gamma,lambda_", [(0.99, 0.95), (0.9, 0.0), (1.0, 1.0)])
@pytest.mark.parametrize("seed", range(6))
def test_matches_the_slow_per_episode_reference(seed, gamma, lambda_):
    block = random_turns(np.random.default_rng(seed))
    advantages, targets = own_step_gae(**block, gamma=gamma, lambda_=lambda_)
    expected = slow_own_step_gae(*block.values(), gamma, lambda_)
    np.testing.assert_allclose(advantages, expected, atol=1e-10)
    present = block["present"]
    np.testing.assert_allclose(targets[present], (expected + block["values"])[present])
    assert not targets[~present].any() and not advantages[~present].any()


@pytest.mark.parametrize("seed", range(4))
def test_acting_every_step_is_block_gae(seed):
    rng = np.random.default_rng(seed)
    horizon, worlds = 12, 5
    values = rng.normal(size=(horizon, worlds))
    ends = rng.random((horizon, worlds)) < 0.2
    terminated = ends & (rng.random((horizon, worlds)) < 0.5)
    next_values = np.concatenate([values[1:], rng.normal(size=(1, worlds))])
    next_values = np.where(ends, rng.normal(size=(horizon, worlds)), next_values)
    rewards = rng.normal(size=(horizon, worlds))
    every = np.ones((horizon, worlds), bool)
    ours, targets = own_step_gae(
        rewards, values, next_values, every, every, terminated, ends & ~terminated,
        np.zeros_like(every), gamma=0.99, lambda_=0.95,
    )  # fmt: skip
    theirs, their_targets = block_gae(
        rewards, values, next_values, terminated, ends & ~terminated, gamma=0.99, lambda_=0.95
    )
    np.testing.assert_allclose(ours, theirs, atol=1e-12)
    np.testing.assert_allclose(targets, their_targets, atol=1e-12)
    # That shortcut is the span recursion's answer: the slow reference agrees.
    reference = slow_own_step_gae(
        rewards, values, next_values, every, every, terminated, ends & ~terminated,
        np.zeros_like(every), 0.99, 0.95,
    )  # fmt: skip
    np.testing.assert_allclose(ours, reference, atol=1e-10)


def test_hand_computed_turns():
    """One world, five env steps, gamma 0.5, lambda 1. The agent acts at t=0 (V 1) and
    t=2 (V 4); another agent moves at t=1 and t=3; it earns 1 at every step. The block
    is cut after t=4, the agent last observed after t=3 (V 8).

    Step 0 spans t=0..1: R=2, bootstraps from V(o_2)=4. Step 1 spans t=2..4 (cut):
    R=3, bootstraps from next_values[3]=8. A_1 = 3 + 0.5*8 - 4 = 3;
    A_0 = 2 + 0.5*4 - 1 + 0.5*3 = 4.5."""
    present = np.array([[1, 0, 1, 0, 0]], bool).T
    observed_after = np.array([[0, 1, 0, 1, 0]], bool).T
    values = np.array([[1.0, 0.0, 4.0, 0.0, 0.0]]).T
    next_values = np.array([[0.0, 4.0, 0.0, 8.0, 0.0]]).T
    never = np.zeros((5, 1), bool)
    advantages, targets = own_step_gae(
        np.ones((5, 1)), values, next_values, present, observed_after, never, never, never,
        gamma=0.5, lambda_=1.0,
    )  # fmt: skip
    np.testing.assert_allclose(advantages[:, 0], [4.5, 0, 3.0, 0, 0])
    np.testing.assert_allclose(targets[:, 0], [5.5, 0, 7.0, 0, 0])


def test_a_death_ends_the_span_without_bootstrap():
    present = np.array([[1, 1, 0]], bool).T
    died = np.array([[0, 1, 0]], bool).T
    never = np.zeros((3, 1), bool)
    advantages, _ = own_step_gae(
        np.array([[1.0, 2.0, 5.0]]).T, np.array([[0.5, 1.0, 0.0]]).T,
        np.array([[1.0, 9.0, 9.0]]).T,
        present, np.array([[1, 0, 0]], bool).T, never, never, died, gamma=1.0, lambda_=1.0,
    )  # fmt: skip
    # Step 1 dies: A_1 = 2 - 1 = 1 (no bootstrap from V 9, and the reward at t=2 is not
    # its own); A_0 = 1 + V(o_1) 1 - 0.5 + A_1 = 2.5.
    np.testing.assert_allclose(advantages[:, 0], [2.5, 1.0, 0.0])
