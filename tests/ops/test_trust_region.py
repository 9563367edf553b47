"""ops.trust_region against explicit Fisher matrices, a quadratic with a known solution,
hand-computed literals and the line search's rejection path."""

import math

import pytest
import torch

from marllib_ext.ops.trust_region import (
    backtracking_line_search,
    conjugate_gradient,
    fisher_vector_product,
    flat_params,
    max_step_size,
    set_flat_params,
)


@pytest.fixture(autouse=True)
def float64():
    """Exact comparisons in double precision; the default dtype is restored after."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def categorical_mean_kl(logits_fn, x):
    """mean_x KL(pi_old(.|x) || pi_theta(.|x)) with pi_old = pi_theta detached."""
    logits = logits_fn(x)
    log_p = torch.log_softmax(logits, -1)
    log_p_old = log_p.detach()
    return (log_p_old.exp() * (log_p_old - log_p)).sum(-1).mean()


def full_matrix(product, n):
    return torch.stack([product(torch.eye(n)[i]) for i in range(n)], dim=1)


def test_fvp_equals_the_analytic_fisher_of_a_linear_softmax_policy():
    torch.manual_seed(0)
    n_actions, dim, n = 3, 4, 7
    layer = torch.nn.Linear(dim, n_actions)
    x = torch.randn(n, dim)
    params = list(layer.parameters())  # weight (A, D) row-major, then bias (A,)
    product = fisher_vector_product(categorical_mean_kl(layer, x), params, damping=0.0)
    fisher = full_matrix(product, n_actions * dim + n_actions)
    # F = mean_x J^T (diag p - p p^T) J, J = [I_A (x) x^T, I_A] = d logits / d theta.
    expected = torch.zeros_like(fisher)
    with torch.no_grad():
        p = torch.softmax(layer(x), -1)
    for k in range(n):
        jacobian = torch.cat(
            [torch.kron(torch.eye(n_actions), x[k][None]), torch.eye(n_actions)], 1
        )
        curvature = torch.diag(p[k]) - torch.outer(p[k], p[k])
        expected += jacobian.T @ curvature @ jacobian / n
    torch.testing.assert_close(fisher, expected)


@pytest.mark.parametrize("policy", ["categorical_mlp", "gaussian_mlp"])
def test_fvp_equals_the_hessian_of_the_mean_kl_on_small_networks(policy):
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    log_std = torch.nn.Parameter(torch.tensor([-0.3, 0.2]))
    params = [*net.parameters()] + ([log_std] if policy == "gaussian_mlp" else [])
    x = torch.randn(6, 3)
    old = flat_params(params)

    def mean_kl_at(vector):
        # KL(pi_old || pi_vector), pi_old fixed at the current parameters.
        offset, tensors = 0, []
        for p in params:
            tensors.append(vector[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        hidden = torch.tanh(x @ tensors[0].T + tensors[1])
        out = hidden @ tensors[2].T + tensors[3]
        with torch.no_grad():
            out_old = net(x)
        if policy == "categorical_mlp":
            log_p, log_p_old = torch.log_softmax(out, -1), torch.log_softmax(out_old, -1)
            return (log_p_old.exp() * (log_p_old - log_p)).sum(-1).mean()
        new = torch.distributions.Normal(out, tensors[4].exp())
        old_dist = torch.distributions.Normal(out_old, log_std.detach().exp())
        return torch.distributions.kl_divergence(old_dist, new).sum(-1).mean()

    hessian = torch.autograd.functional.hessian(mean_kl_at, old)
    kl = mean_kl_at(torch.cat([p.reshape(-1) for p in params]))
    damping = 0.1
    product = fisher_vector_product(kl, params, damping=damping)
    v = torch.randn(old.numel())
    torch.testing.assert_close(product(v), hessian @ v + damping * v)


def test_gaussian_log_std_block_of_the_fisher_is_two():
    # The Fisher information of log sigma of a Gaussian is 2 per dimension.
    log_std = torch.nn.Parameter(torch.tensor([0.4, -1.0]))
    mean = torch.zeros(5, 2)
    old = torch.distributions.Normal(mean, log_std.detach().exp())
    new = torch.distributions.Normal(mean, log_std.exp())
    kl = torch.distributions.kl_divergence(old, new).sum(-1).mean()
    fisher = full_matrix(fisher_vector_product(kl, [log_std], damping=0.0), 2)
    torch.testing.assert_close(fisher, 2.0 * torch.eye(2))


def test_conjugate_gradient_literal_two_by_two():
    a = torch.tensor([[4.0, 1.0], [1.0, 3.0]])
    x = conjugate_gradient(lambda v: a @ v, torch.tensor([1.0, 2.0]), iterations=2)
    torch.testing.assert_close(x, torch.tensor([1 / 11, 7 / 11]))


def test_conjugate_gradient_solves_a_quadratic_in_n_iterations_and_improves_before():
    torch.manual_seed(2)
    m = torch.randn(6, 6)
    a = m @ m.T + 0.5 * torch.eye(6)  # the quadratic 0.5 x^T A x - b^T x, minimum A^-1 b
    b = torch.randn(6)
    solution = torch.linalg.solve(a, b)
    torch.testing.assert_close(conjugate_gradient(lambda v: a @ v, b, iterations=6), solution)
    errors = [
        float((x - solution) @ a @ (x - solution))
        for x in (conjugate_gradient(lambda v: a @ v, b, iterations=k) for k in range(1, 6))
    ]
    assert all(later < earlier for earlier, later in zip(errors, errors[1:], strict=False))
    assert torch.equal(conjugate_gradient(lambda v: a @ v, torch.zeros(6), 10), torch.zeros(6))


def test_max_step_size_literals():
    s = torch.tensor([1.0, 2.0])
    # s^T F s = 1 * 2 + 2 * 2 = 6 -> sqrt(2 * 0.03 / 6) = 0.1
    assert max_step_size(s, torch.tensor([2.0, 2.0]), delta=0.03) == pytest.approx(0.1)
    assert max_step_size(torch.zeros(2), torch.zeros(2), delta=0.01) == 0.0
    # The step reaches the KL ball's edge under the quadratic model.
    beta = max_step_size(s, torch.tensor([2.0, 2.0]), delta=0.03)
    assert 0.5 * beta**2 * 6.0 == pytest.approx(0.03)


def scalar_problem(start=0.3):
    """theta in R: L = d - d^2 and mean KL = d^2 / 2 with d = theta - start; the first
    order gain of a step s is g s with g = dL/dd(0) = 1."""
    theta = torch.nn.Parameter(torch.tensor([start]))

    def evaluate():
        d = theta.item() - start
        return d - d * d, 0.5 * d * d

    return theta, evaluate


def search(theta, evaluate, **overrides):
    settings = dict(surrogate_before=0.0, expected_improvement=2.0, delta=0.5,
                    backtrack_coef=0.8, max_steps=10, accept_ratio=0.1)  # fmt: skip
    return backtracking_line_search(
        [theta], torch.tensor([2.0]), evaluate, **(settings | overrides)
    )


def test_line_search_accepts_the_first_step_that_gains_enough_by_hand():
    # Step 2 * 0.8^k: the gain d - d^2 first turns positive at k = 4 (d = 0.8192, gain
    # 0.14811, ratio 0.14811 / 0.8192 = 0.181 > 0.1, KL 0.3355 <= 0.5).
    theta, evaluate = scalar_problem()
    result = search(theta, evaluate)
    assert (result.accepted, result.steps) == (True, 5)
    assert result.fraction == pytest.approx(0.8**4)
    assert result.improvement == pytest.approx(0.8192 - 0.8192**2)
    assert theta.item() == pytest.approx(0.3 + 0.8192)
    # accept_ratio 0.5: ratios 0.181, 0.345, 0.476 fail, k = 7 (d = 0.41943) gives 0.581.
    theta, evaluate = scalar_problem()
    result = search(theta, evaluate, accept_ratio=0.5)
    assert (result.accepted, result.steps) == (True, 8)
    assert theta.item() == pytest.approx(0.3 + 2 * 0.8**7)


def test_line_search_backtracks_until_the_kl_fits():
    # delta 0.1: KL = d^2 / 2 <= 0.1 needs d <= 0.4472; k = 4..6 gain but break it.
    theta, evaluate = scalar_problem()
    result = search(theta, evaluate, delta=0.1)
    assert (result.accepted, result.steps) == (True, 8)
    assert result.kl == pytest.approx(0.5 * (2 * 0.8**7) ** 2)
    assert result.kl <= 0.1


def test_rejected_line_search_restores_the_parameters_from_a_copy():
    # No candidate within 3 steps gains (d = 2, 1.6, 1.28 all lose): the parameters
    # come back to the start, not to the last candidate tried.
    theta, evaluate = scalar_problem()
    result = search(theta, evaluate, max_steps=3)
    assert (result.accepted, result.steps, result.fraction) == (False, 3, 0.0)
    assert theta.item() == 0.3
    assert result.improvement == pytest.approx(1.28 - 1.28**2)
    # Every tensor of a module, bit for bit.
    torch.manual_seed(3)
    layer = torch.nn.Linear(4, 3)
    before = [p.detach().clone() for p in layer.parameters()]
    step = torch.randn(15)
    result = backtracking_line_search(
        list(layer.parameters()), step, lambda: (-1.0, 0.0), surrogate_before=0.0,
        expected_improvement=1.0, delta=0.01, backtrack_coef=0.5, max_steps=4, accept_ratio=0.1,
    )  # fmt: skip
    assert not result.accepted
    assert all(torch.equal(p, q) for p, q in zip(layer.parameters(), before, strict=True))


def test_set_flat_params_checks_the_length():
    layer = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="vector has 5 entries, the parameters 6"):
        set_flat_params(list(layer.parameters()), torch.zeros(5))


def test_a_whole_trust_region_step_keeps_the_kl_within_delta_and_gains():
    torch.manual_seed(4)
    layer = torch.nn.Linear(4, 5)
    params = list(layer.parameters())
    x, actions, advantages = torch.randn(64, 4), torch.randint(0, 5, (64,)), torch.randn(64)
    with torch.no_grad():
        log_p_old = torch.log_softmax(layer(x), -1)

    def surrogate():
        log_p = torch.log_softmax(layer(x), -1)
        ratio = (
            log_p.gather(1, actions[:, None])[:, 0] - log_p_old.gather(1, actions[:, None])[:, 0]
        ).exp()
        return (ratio * advantages).mean()

    def mean_kl():
        log_p = torch.log_softmax(layer(x), -1)
        return (log_p_old.exp() * (log_p_old - log_p)).sum(-1).mean()

    delta = 0.01
    gradient = torch.cat([g.reshape(-1) for g in torch.autograd.grad(surrogate(), params)])
    product = fisher_vector_product(mean_kl(), params, damping=0.1)
    direction = conjugate_gradient(product, gradient, iterations=10)
    beta = max_step_size(direction, product(direction), delta)
    with torch.no_grad():
        before = float(surrogate())

    def evaluate():
        with torch.no_grad():
            return float(surrogate()), float(mean_kl())

    result = backtracking_line_search(
        params, beta * direction, evaluate, surrogate_before=before,
        expected_improvement=float(gradient @ (beta * direction)), delta=delta,
        backtrack_coef=0.8, max_steps=10, accept_ratio=0.5,
    )  # fmt: skip
    assert result.accepted
    assert 0.0 < result.kl <= delta
    assert result.improvement > 0.0
    assert math.isclose(evaluate()[1], result.kl)
