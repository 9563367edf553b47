"""ops/efx.py against slow references, literal cases and the seed's invariants."""

import numpy as np
import pytest

from marllib_ext.ops.efx import (
    budget_capped_intrinsic,
    budget_path,
    budget_slack,
    budget_step,
    conservative_advantage,
    intrinsic_rewards,
)


def slow_conservative(a_ext, delta, z, episode_ends):
    """Seed 000 sec. 1.4 literally: backward DP per segment with S from its definition."""
    a_ext = np.asarray(a_ext, float)
    horizon, n_agents = a_ext.shape
    z = np.broadcast_to(np.asarray(z, float).reshape(horizon, -1), (horizon, n_agents))
    out = np.zeros_like(a_ext)
    start = 0
    for end in range(horizon):
        if not (episode_ends[end] or end == horizon - 1):
            continue
        for i in range(n_agents):
            slack_end = sum(delta[k] for k in range(end, end + 1)) - z[end, i]
            out[end, i] = min(a_ext[end, i], slack_end)
            for t in range(end - 1, start - 1, -1):
                out[t, i] = min(a_ext[t, i], out[t + 1, i])
        start = end + 1
    return out


def test_intrinsic_rewards_literal():
    logp = np.array([[-1.0, -2.0], [-0.5, 0.0]])
    r_int, delta = intrinsic_rewards(logp, coef=0.5)
    np.testing.assert_allclose(r_int, [[0.5, 1.0], [0.25, 0.0]])
    np.testing.assert_allclose(delta, [1.5, 0.25])


def test_budget_path_literal_with_clipping():
    # z: 3 -> 3-1=2 -> 2-4=-2 clipped to -1 -> -1-(-5)=4 clipped to 3.5
    z = budget_path([1.0, 4.0, -5.0, 0.0], z0=3.0, z_low=-1.0, z_high=3.5)
    np.testing.assert_allclose(z, [3.0, 2.0, -1.0, 3.5])


def test_budget_path_matches_loop_reference():
    rng = np.random.default_rng(0)
    delta = rng.normal(size=50)
    z = budget_path(delta, z0=0.3, z_low=-2.0, z_high=2.0)
    current = 0.3
    for t in range(50):
        assert z[t] == pytest.approx(current)
        current = min(max(current - delta[t], -2.0), 2.0)


def test_budget_capped_intrinsic_literal():
    # z 3 -> 1 (paid 2) -> 0 after 1.5 (paid the 1 left) -> nothing more at 0 or below
    got = budget_capped_intrinsic([2.0, 1.5, 0.7, 0.3], [3.0, 1.0, 0.0, -0.5])
    np.testing.assert_allclose(got, [2.0, 1.0, 0.0, 0.0])
    # a negative delta passes through (it raises the budget)
    np.testing.assert_allclose(budget_capped_intrinsic([-0.5], [0.0]), [-0.5])
    with pytest.raises(ValueError, match="shape"):
        budget_capped_intrinsic([1.0, 2.0], [1.0])


@pytest.mark.parametrize("z0", [0.0, 0.7, 4.0, 100.0])
def test_budget_capped_intrinsic_pays_at_most_the_budget(z0):
    """Along a budget path (z_low <= 0, delta >= 0), the episode's bonuses sum to
    ``min(J_int, z0)``, against a loop that pays step by step from what is left."""
    rng = np.random.default_rng(int(z0 * 10))
    delta = rng.exponential(0.3, size=40)
    z = budget_path(delta, z0=z0, z_low=-1.0, z_high=200.0)
    got = budget_capped_intrinsic(delta, z)
    left, paid = z0, []
    for step in delta:
        paid.append(min(step, max(left, 0.0)))
        left -= step
    np.testing.assert_allclose(got, paid, atol=1e-12)
    assert got.sum() == pytest.approx(min(delta.sum(), z0))


def test_budget_slack_literal_and_reference():
    delta = np.array([1.0, 2.0, 3.0])
    z = np.array([6.0, 5.0, 3.0])
    np.testing.assert_allclose(budget_slack(delta, z), [0.0, 0.0, 0.0])
    rng = np.random.default_rng(1)
    delta, z = rng.normal(size=9), rng.normal(size=(9, 2))
    expected = np.array([[delta[t:].sum() - z[t, i] for i in range(2)] for t in range(9)])
    np.testing.assert_allclose(budget_slack(delta, z), expected)


def test_slack_is_constant_within_a_segment_without_clipping():
    rng = np.random.default_rng(2)
    delta = rng.normal(size=30)
    z = budget_path(delta, z0=1.0, z_low=-1e9, z_high=1e9)
    slack = budget_slack(delta, z)
    np.testing.assert_allclose(slack, np.full(30, slack[0]), atol=1e-9)


def test_slack_changes_where_the_budget_is_clipped():
    delta = np.array([5.0, 1.0, 1.0])
    z = budget_path(delta, z0=1.0, z_low=0.0, z_high=10.0)  # 1, 0 (clipped), -> 0 (clipped)
    slack = budget_slack(delta, z)
    assert slack[0] != pytest.approx(slack[1])


def test_conservative_literal_slack_is_the_minimum():
    a_ext = np.array([[3.0], [2.0], [5.0], [4.0]])
    delta = np.array([0.1, 0.1, 0.1, 1.0])
    z = np.array([10.0, 9.9, 9.8, 2.5])  # S[T] = 1.0 - 2.5 = -1.5 < every A_ext
    out = conservative_advantage(a_ext, delta, z, [False, False, False, True])
    np.testing.assert_allclose(out[:, 0], [-1.5, -1.5, -1.5, -1.5])


def test_conservative_literal_two_segments_running_minimum():
    a_ext = np.array([[3.0, 1.0], [2.0, 4.0], [5.0, 0.0], [4.0, 6.0], [1.0, 2.0]])
    delta = np.array([0.0, 0.0, 10.0, 0.0, 10.0])
    z = np.zeros(5)  # S at both ends = 10: never binds
    ends = [False, False, True, False, True]
    out = conservative_advantage(a_ext, delta, z, ends)
    # segment 1 (t=0..2): reversed running minimum; segment 2 (t=3..4) restarts.
    np.testing.assert_allclose(out, [[2.0, 0.0], [2.0, 0.0], [5.0, 0.0], [1.0, 2.0], [1.0, 2.0]])


def test_conservative_per_agent_budget_broadcast():
    a_ext = np.zeros((2, 2))
    z = np.array([[0.0, 0.0], [1.0, -1.0]])
    out = conservative_advantage(a_ext, [0.0, 0.5], z, [False, True])
    # S_T per agent: 0.5 - 1 = -0.5 (binds) and 0.5 + 1 = 1.5 (does not)
    np.testing.assert_allclose(out, [[-0.5, 0.0], [-0.5, 0.0]])


@pytest.mark.parametrize("seed", range(8))
def test_conservative_matches_slow_reference_on_random_segments(seed):
    rng = np.random.default_rng(seed)
    horizon, n_agents = 60, 3
    a_ext = rng.normal(size=(horizon, n_agents))
    delta = rng.normal(size=horizon)
    z = rng.normal(size=horizon) if seed % 2 else rng.normal(size=(horizon, n_agents))
    ends = rng.random(horizon) < 0.15
    out = conservative_advantage(a_ext, delta, z, ends)
    np.testing.assert_allclose(out, slow_conservative(a_ext, delta, z, ends))


def test_last_index_always_ends_a_segment_and_1d_input():
    a_ext = np.array([2.0, 1.0, 3.0])
    out = conservative_advantage(a_ext, np.zeros(3), np.full(3, -100.0), np.zeros(3, bool))
    np.testing.assert_allclose(out, [1.0, 1.0, 3.0])


def test_unreachable_budget_reduces_to_running_minimum_of_a_ext():
    rng = np.random.default_rng(5)
    a_ext = rng.normal(size=(20, 2))
    ends = np.zeros(20, bool)
    ends[[6, 13, 19]] = True
    out = conservative_advantage(a_ext, np.zeros(20), np.full(20, -1e9), ends)
    for start, end in ((0, 6), (7, 13), (14, 19)):
        segment = a_ext[start : end + 1]
        np.testing.assert_allclose(out[start : end + 1], np.minimum.accumulate(segment[::-1])[::-1])


def test_shape_errors_name_the_argument():
    with pytest.raises(ValueError, match="delta has shape"):
        conservative_advantage(np.zeros((3, 2)), np.zeros(4), np.zeros(3), np.zeros(3, bool))
    with pytest.raises(ValueError, match="z has shape"):
        conservative_advantage(np.zeros((3, 2)), np.zeros(3), np.zeros((3, 5)), np.zeros(3, bool))


def test_segment_slack_equals_budget_slack_per_segment():
    from marllib_ext.ops.efx import segment_slack

    rng = np.random.default_rng(9)
    delta, z = rng.normal(size=30), rng.normal(size=30)
    ends = np.zeros(30, bool)
    ends[[4, 5, 17]] = True
    out = segment_slack(delta, z, ends)
    for start, end in ((0, 4), (5, 5), (6, 17), (18, 29)):
        np.testing.assert_allclose(
            out[start : end + 1], budget_slack(delta[start : end + 1], z[start : end + 1])
        )


def test_budget_controller_direction_clip_and_state():
    from marllib_ext.ops.efx import BudgetController

    controller = BudgetController(z=1.0, z_low=0.0, z_high=2.0, lr=0.1, ext_scale=2.0)
    assert controller.update(j_ext=5.0, j_int=3.0) is None  # first call: records J_ext
    # min((10 - 5) / 2, (1.5 - 1) / 2) = 0.25: the intrinsic term, and the sgd step is
    # exactly seed 000's z + lr_z * (J_int - z) = 1 + 0.1 * 0.5.
    slack = controller.update(j_ext=10.0, j_int=1.5)
    assert slack == pytest.approx(0.25) and controller.z == pytest.approx(1.05)
    slack = controller.update(j_ext=4.0, j_int=3.0)  # min((4 - 10) / 2, ...) = -3 -> down
    assert slack == pytest.approx(-3.0) and controller.z == pytest.approx(1.05 - 0.1 * 2 * 3)
    controller.update(j_ext=1e9, j_int=1e9)
    controller.update(j_ext=2e9, j_int=2e9)
    assert controller.z == 2.0  # clipped at z_high
    clone = BudgetController(z=0.0, z_low=0.0, z_high=2.0, lr=0.1)
    clone.set_state(controller.get_state())
    assert clone.get_state() == controller.get_state()


def test_budget_controller_adam_moves_lr_of_the_range_per_step():
    from marllib_ext.ops.efx import BudgetController

    controller = BudgetController(z=0.0, z_low=-10, z_high=10, lr=0.05, optimizer="adam")
    controller.update(j_ext=0.0, j_int=0.0)
    controller.update(j_ext=100.0, j_int=100.0)  # any positive slack: Adam's first step = 1
    assert controller.z == pytest.approx(0.05 * 20, rel=1e-6)


def test_a_flat_extrinsic_return_keeps_z_at_z_low_unless_a_tolerance_is_given():
    from marllib_ext.ops.efx import BudgetController

    def run(tolerance):
        controller = BudgetController(
            z=0.0, z_low=0.0, z_high=100.0, lr=0.1, ext_tolerance=tolerance
        )
        slacks = [controller.update(j_ext=0.0, j_int=60.0) for _ in range(4)]
        return controller, slacks

    seed_rule, slacks = run(0.0)  # min(0 / 1, (60 - z) / 100) = 0 every step
    assert slacks[1:] == [0.0, 0.0, 0.0] and seed_rule.z == 0.0
    tolerant, slacks = run(0.02)
    # min(0 + 0.02, (60 - z) / 100): the tolerance, so z rises 0.1 * 100 * 0.02 = 0.2 a step
    assert slacks[1:] == pytest.approx([0.02] * 3) and tolerant.z == pytest.approx(0.6)
    with pytest.raises(ValueError, match="ext_tolerance"):
        BudgetController(z=0.0, z_low=0.0, z_high=1.0, lr=0.1, ext_tolerance=-1.0)


def test_budget_controller_empty_range_stays():
    from marllib_ext.ops.efx import BudgetController

    controller = BudgetController(z=3.0, z_low=3.0, z_high=3.0, lr=0.5)
    controller.update(j_ext=0.0, j_int=0.0)
    assert controller.update(j_ext=1.0, j_int=10.0) is None and controller.z == 3.0


def test_initial_budget_sampling_modes():
    from marllib_ext.ops.efx import sample_initial_budget

    rng = np.random.default_rng(0)
    draws = [
        sample_initial_budget(rng, "defmarl", budget=0, z_low=-1, z_high=1) for _ in range(4000)
    ]
    assert np.mean(np.isclose(draws, -1)) == pytest.approx(0.3, abs=0.03)
    assert np.mean(np.isclose(draws, 1)) == pytest.approx(0.2, abs=0.03)
    assert sample_initial_budget(rng, "fixed", budget=0.7, z_low=-1, z_high=1) == 0.7
    uniform = [
        sample_initial_budget(rng, "uniform", budget=0, z_low=2, z_high=3) for _ in range(100)
    ]
    assert min(uniform) >= 2 and max(uniform) <= 3


def test_initial_budget_sampling_above_a_tracked_floor():
    from marllib_ext.ops.efx import sample_initial_budget

    rng = np.random.default_rng(1)
    draws = np.array(
        [
            sample_initial_budget(rng, "defmarl", budget=0, z_low=0, z_high=10, floor=8)
            for _ in range(4000)
        ]
    )
    assert np.mean(draws == 0) == pytest.approx(0.3, abs=0.03)  # z_low: where the floor is measured
    assert np.mean(draws == 10) == pytest.approx(0.2, abs=0.03)
    rest = draws[(draws != 0) & (draws != 10)]
    assert rest.min() >= 8 and rest.mean() == pytest.approx(9.0, abs=0.05)
    uniform = [
        sample_initial_budget(rng, "uniform", budget=0, z_low=0, z_high=10, floor=12.0)
        for _ in range(10)
    ]
    assert uniform == [10.0] * 10  # a floor above z_high is clipped to it


def test_budget_controller_tracks_its_floor_and_keeps_it_in_state():
    from marllib_ext.ops.efx import BudgetController
    from marllib_ext.ops.efx.outer_loop import FLOOR_RATE, MIN_DEMAND_RANGE

    controller = BudgetController(z=0.0, z_low=0.0, z_high=100.0, lr=0.1)
    assert controller.floor == 0.0 and controller.demand_range == 100.0
    controller.track_floor(50.0)
    assert controller.floor == pytest.approx(FLOOR_RATE * 50.0)  # 10 with rate 0.2
    controller.track_floor(float("nan"))  # no z_low episode this iteration
    assert controller.floor == pytest.approx(10.0)
    for _ in range(200):
        controller.track_floor(99.0)
    assert controller.floor == pytest.approx(99.0)
    assert controller.demand_range == pytest.approx(MIN_DEMAND_RANGE * 100.0)  # 1 < 10
    controller.track_floor(500.0)
    assert controller.floor <= 100.0
    restored = BudgetController(z=0.0, z_low=0.0, z_high=100.0, lr=0.1)
    restored.set_state(controller.get_state())
    assert restored.floor == controller.floor
    old_state = {k: v for k, v in controller.get_state().items() if k != "floor"}
    restored.set_state(old_state)  # checkpoints written before the floor existed
    assert restored.floor == 0.0


def test_intrinsic_budget_bound_closed_form():
    from marllib_ext.ops.efx import (
        GAUSSIAN_ENTROPY_UNIT_STD,
        intrinsic_budget_bound,
        max_action_entropy,
    )

    assert max_action_entropy(5) == pytest.approx(np.log(5))
    assert max_action_entropy(nvec=[2, 3]) == pytest.approx(np.log(6))
    assert abs(GAUSSIAN_ENTROPY_UNIT_STD - 1.4189385332) < 1e-9  # 0.5 * log(2 pi e)
    assert max_action_entropy(continuous_dims=2) == pytest.approx(2 * 1.4189385332)
    assert max_action_entropy(continuous_dims=3, entropy_per_dim=0.5) == pytest.approx(1.5)
    # 0.5 * 25 steps * (log 5 + log 5 + log 2)
    bound = intrinsic_budget_bound(
        coef=0.5, max_episode_steps=25, max_entropies=[np.log(5), np.log(5), np.log(2)]
    )
    assert bound == pytest.approx(0.5 * 25 * np.log(50))


def slow_slack_cap(a_hat, slack, kappa, z_range, only_unmet):
    out, binding = np.array(a_hat, float), np.zeros(np.shape(a_hat), bool)
    for t in range(len(a_hat)):
        for i in range(a_hat.shape[1]):
            cap = kappa * slack[t] / z_range
            if (slack[t] < 0 or not only_unmet) and cap < a_hat[t, i]:
                out[t, i], binding[t, i] = cap, True
    return out, binding


def test_slack_cap_literal_per_step_and_hinge():
    from marllib_ext.ops.efx import slack_cap_advantage

    a_hat = np.array([1.0, -1.0, 0.5, 0.2])
    slack = np.array([-2.0, -2.0, 4.0, 1.0])  # caps kappa*S/range = -0.5, -0.5, 1.0, 0.25
    per_step, binding = slack_cap_advantage(a_hat, slack, kappa=2.5, z_range=10.0, only_unmet=False)
    np.testing.assert_allclose(per_step, [-0.5, -1.0, 0.5, 0.2])
    np.testing.assert_array_equal(binding, [True, False, False, False])
    a_hat[3] = 0.3  # above its cap 0.25: per_step caps it, hinge does not (S >= 0)
    per_step, _ = slack_cap_advantage(a_hat, slack, kappa=2.5, z_range=10.0, only_unmet=False)
    hinge, binding = slack_cap_advantage(a_hat, slack, kappa=2.5, z_range=10.0, only_unmet=True)
    np.testing.assert_allclose(per_step, [-0.5, -1.0, 0.5, 0.25])
    np.testing.assert_allclose(hinge, [-0.5, -1.0, 0.5, 0.3])
    np.testing.assert_array_equal(binding, [True, False, False, False])


@pytest.mark.parametrize("only_unmet", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_slack_cap_matches_slow_reference(seed, only_unmet):
    from marllib_ext.ops.efx import slack_cap_advantage

    rng = np.random.default_rng(seed)
    a_hat, slack = rng.normal(size=(40, 3)), rng.normal(size=40) * 5
    out, binding = slack_cap_advantage(a_hat, slack, kappa=1.7, z_range=6.0, only_unmet=only_unmet)
    expected, expected_binding = slow_slack_cap(a_hat, slack, 1.7, 6.0, only_unmet)
    np.testing.assert_allclose(out, expected)
    np.testing.assert_array_equal(binding, expected_binding)


@pytest.mark.parametrize("seed", range(4))
def test_seed_dp_binding_matches_slow_reference(seed):
    from marllib_ext.ops.efx import seed_dp_binding

    rng = np.random.default_rng(seed)
    horizon = 50
    a_ext, delta, z = (
        rng.normal(size=(horizon, 2)),
        rng.normal(size=horizon),
        rng.normal(size=horizon),
    )
    ends = rng.random(horizon) < 0.2
    binding = seed_dp_binding(a_ext, delta, z, ends)
    expected = np.zeros((horizon, 2), bool)
    start = 0
    for end in range(horizon):
        if not (ends[end] or end == horizon - 1):
            continue
        slack_end = delta[end] - z[end]
        for t in range(start, end + 1):
            for i in range(2):
                expected[t, i] = slack_end < min(a_ext[t : end + 1, i])
        start = end + 1
    np.testing.assert_array_equal(binding, expected)
    assert binding.any() and not binding.all()


def test_seed_dp_form_is_unchanged():
    """seed_dp is the function the first round shipped: literal case from its tests."""
    a_ext = np.array([[3.0], [2.0], [5.0], [4.0]])
    out = conservative_advantage(
        a_ext, [0.1, 0.1, 0.1, 1.0], [10.0, 9.9, 9.8, 2.5], [False, False, False, True]
    )
    np.testing.assert_allclose(out[:, 0], [-1.5, -1.5, -1.5, -1.5])


@pytest.mark.parametrize("crossing", [0.0, 0.137, 3.3, 7.9, 10.0])
def test_largest_budget_bisection_matches_grid_search(crossing):
    from marllib_ext.ops.efx import largest_budget_within

    def curve(z):  # monotone non-increasing, flat until `crossing`, then falling
        return 5.0 - max(0.0, z - crossing) ** 1.5

    z_low, z_high, iterations, target = 0.0, 10.0, 12, 5.0 - 1e-12
    chosen, evaluations = largest_budget_within(
        curve, z_low=z_low, z_high=z_high, target=target, iterations=iterations
    )
    grid = np.linspace(z_low, z_high, 100_001)
    brute = grid[np.array([curve(z) for z in grid]) >= target].max()
    assert chosen <= brute + 1e-9
    assert brute - chosen <= (z_high - z_low) / 2**iterations + 1e-4
    assert len(evaluations) <= iterations + 1
    assert all(curve(z) >= target for z, value in evaluations if z <= chosen)


def slow_demand_push(a_conservative, slack, logp, entropy, kappa, z_range):
    """demand_push row by row: the push only where the segment is short of its budget."""
    out = np.zeros(logp.shape)
    for t in range(len(a_conservative)):
        shortfall = min(1.0, max(0.0, -slack[t]) / z_range)
        for i in range(logp.shape[1]):
            intrinsic_advantage = -logp[t, i] - entropy[t, i]
            out[t, i] = a_conservative[t] + kappa * shortfall * intrinsic_advantage
    return out


def test_demand_push_literal():
    from marllib_ext.ops.efx import demand_push_advantage

    a_cons = np.array([0.5, -0.2, 1.0])
    slack = np.array([-4.0, 3.0, 0.0])  # shortfall 4/10 on row 0 only
    logp = np.log([[0.1, 0.5], [0.1, 0.5], [0.2, 0.2]])
    entropy = np.array([[1.0, 1.0], [1.0, 1.0], [2.0, 2.0]])
    out, weight = demand_push_advantage(a_cons, slack, logp, entropy, kappa=2.0, z_range=10.0)
    np.testing.assert_allclose(weight, [0.8, 0.0, 0.0])
    # row 0: 0.5 + 0.8 * (-log p - 1): the rarer action (p = 0.1) is pushed up, the
    # common one (p = 0.5, -log p = 0.69 < H) down.
    np.testing.assert_allclose(
        out[0], [0.5 + 0.8 * (np.log(10.0) - 1.0), 0.5 + 0.8 * (np.log(2.0) - 1.0)]
    )
    np.testing.assert_allclose(out[1:], [[-0.2, -0.2], [1.0, 1.0]])  # met: conservative alone


@pytest.mark.parametrize("seed", range(4))
def test_demand_push_matches_slow_reference(seed):
    from marllib_ext.ops.efx import demand_push_advantage

    rng = np.random.default_rng(seed)
    horizon = 30
    a_cons, slack = rng.normal(size=horizon), rng.normal(size=horizon) * 3
    logp, entropy = -rng.exponential(size=(horizon, 3)), rng.exponential(size=(horizon, 3))
    out, weight = demand_push_advantage(a_cons, slack, logp, entropy, kappa=1.3, z_range=7.0)
    np.testing.assert_allclose(out, slow_demand_push(a_cons, slack, logp, entropy, 1.3, 7.0))
    np.testing.assert_array_equal(weight > 0, slack < 0)


def test_demand_push_is_larger_the_larger_the_shortfall():
    """The same row: budget met -> no push; more unmet -> proportionally larger push."""
    from marllib_ext.ops.efx import demand_push_advantage

    logp, entropy = np.log([[0.05]]), np.array([[1.2]])  # a rare action: positive push
    pushes = [
        demand_push_advantage(np.zeros(1), np.array([s]), logp, entropy, kappa=1.0, z_range=10.0)[
            0
        ][0, 0]
        for s in (5.0, 0.0, -2.0, -4.0)
    ]
    assert pushes[0] == pushes[1] == 0.0
    assert 0.0 < pushes[2] < pushes[3]
    np.testing.assert_allclose(pushes[3], 2.0 * pushes[2])


def test_shortfall_weight_is_capped_at_kappa():
    from marllib_ext.ops.efx import shortfall_weight

    weight = shortfall_weight(np.array([3.0, -2.0, -10.0, -25.0]), kappa=2.0, z_range=10.0)
    np.testing.assert_allclose(weight, [0.0, 0.4, 2.0, 2.0])


def test_entropy_baselined_intrinsic_advantage_has_mean_zero_and_entropy_gradient():
    """E_a[-log pi - H] = 0 and E_a[grad log pi * (-log pi - H)] = grad H (softmax)."""
    import torch

    from marllib_ext.ops.efx import entropy_baselined_intrinsic_advantage

    logits = torch.tensor([0.3, -1.2, 2.0, 0.1], dtype=torch.float64, requires_grad=True)
    log_probs = torch.log_softmax(logits, -1)
    probs = log_probs.exp()
    entropy = -(probs * log_probs).sum()
    (grad_entropy,) = torch.autograd.grad(entropy, logits, retain_graph=True)
    advantage = entropy_baselined_intrinsic_advantage(
        log_probs.detach().numpy(), np.full(4, entropy.item())
    )
    np.testing.assert_allclose((probs.detach().numpy() * advantage).sum(), 0.0, atol=1e-12)
    surrogate = (probs.detach() * log_probs * torch.from_numpy(advantage)).sum()
    (grad_push,) = torch.autograd.grad(surrogate, logits)
    np.testing.assert_allclose(grad_push.numpy(), grad_entropy.numpy(), atol=1e-12)


def test_budget_step_literals_for_one_world_and_for_every_world_at_once():
    # clip(z - delta, 0, 10): inside the range, below it, above it
    assert budget_step(5.0, 2.0, z_low=0.0, z_high=10.0) == 3.0
    assert budget_step(1.0, 2.0, z_low=0.0, z_high=10.0) == 0.0
    assert budget_step(9.0, -4.0, z_low=0.0, z_high=10.0) == 10.0
    worlds = budget_step(
        np.array([5.0, 1.0, 9.0]), np.array([2.0, 2.0, -4.0]), z_low=0.0, z_high=10.0
    )
    np.testing.assert_array_equal(worlds, [3.0, 0.0, 10.0])
    reference = [budget_step(z, d, z_low=0.0, z_high=10.0) for z, d in [(5, 2), (1, 2), (9, -4)]]
    np.testing.assert_array_equal(worlds, reference)


def test_unit_push_scale_literal():
    """scale='unit' divides -log p - H by its RMS over the rows: [3, -1, 1, -3] has RMS
    sqrt(5); a signal with no spread stays 0."""
    from marllib_ext.ops.efx import demand_push_term

    slack = np.array([-10.0, -10.0, -10.0, 5.0])  # the first three fully unmet
    logp = -np.array([4.0, 0.0, 2.0, -2.0])
    entropy = np.ones(4)
    raw = demand_push_term(slack, logp, entropy, kappa=0.5, z_range=10.0)
    unit = demand_push_term(slack, logp, entropy, kappa=0.5, z_range=10.0, scale="unit")
    np.testing.assert_allclose(raw, [1.5, -0.5, 0.5, 0.0])
    np.testing.assert_allclose(unit, np.array([1.5, -0.5, 0.5, 0.0]) / np.sqrt(5.0))
    flat = demand_push_term(slack, -entropy, entropy, kappa=0.5, z_range=10.0, scale="unit")
    np.testing.assert_array_equal(flat, np.zeros(4))
    with pytest.raises(ValueError, match="scale"):
        demand_push_term(slack, logp, entropy, kappa=0.5, z_range=10.0, scale="std")


@pytest.mark.parametrize("seed", range(3))
def test_unit_push_scale_matches_slow_reference(seed):
    """A tiny signal (a near-uniform policy's surprisal) comes out at unit RMS where the
    budget is fully unmet, whatever its size, in the direction of the raw push."""
    from marllib_ext.ops.efx import demand_push_term

    rng = np.random.default_rng(seed)
    horizon, agents = 40, 3
    slack = -np.full(horizon, 100.0)  # every row fully unmet: w = kappa
    logp = -np.log(5.0) + 1e-3 * rng.normal(size=(horizon, agents))
    entropy = np.full((horizon, agents), np.log(5.0))
    unit = demand_push_term(slack, logp, entropy, kappa=1.0, z_range=10.0, scale="unit")
    centered = [[-logp[t, i] - entropy[t, i] for i in range(agents)] for t in range(horizon)]
    rms = np.sqrt(sum(x * x for row in centered for x in row) / (horizon * agents))
    np.testing.assert_allclose(unit, np.array(centered) / rms)
    np.testing.assert_allclose(np.sqrt(np.mean(unit**2)), 1.0)
