"""itrpo, matrpo and hatrpo: the mean KL after every accepted step stays within
kl_threshold on every iteration, a rejected step leaves the actor as it was, the
progress columns, HATRPO's order and factor, checkpoints and resume."""

import math

import pytest
import torch

from marllib_ext import algos
from marllib_ext.algos import ALGORITHMS
from marllib_ext.algos.api import progress_row
from marllib_ext.algos.happo import FACTOR_MEAN
from marllib_ext.algos.trust_region import policy_parameters
from marllib_ext.algos.trust_region.learners import VALUE_PARAMETER_PREFIXES
from marllib_ext.errors import ConfigError
from marllib_ext.policies.joint_critic import is_critic_module
from marllib_ext.rllib_compat import local_learner, plain_module
from tests.data_parallel import assert_learners_identical, two_learner_algorithm

TOY = {"num_env_runners": 0}
SHARE = {"itrpo": "all", "matrpo": "all", "hatrpo": "individual", "efx_hatrpo": "individual"}


def build(name, env="toy:coordination", **overrides):
    config = algos.get(name, hyperparam_source="toy", **TOY, **overrides).rllib_config(
        env, share_policy=SHARE[name], seed=0
    )
    return config.build_algo()


def test_the_fisher_rows_are_every_kth_row_or_sequence():
    from marllib_ext.algos.trust_region.learners import every_kth_row

    batch = {"obs": torch.arange(10.0)[:, None], "state_in": {"h": torch.arange(10.0)}}
    rows = every_kth_row(batch, 3)
    assert rows["obs"].flatten().tolist() == [0.0, 3.0, 6.0, 9.0]
    assert rows["state_in"]["h"].tolist() == [0.0, 3.0, 6.0, 9.0]
    sequences = {"obs": torch.zeros(5, 4, 2), "seq_lens": torch.tensor([4, 3, 4, 1, 2])}
    rows = every_kth_row(sequences, 2)
    assert rows["obs"].shape == (3, 4, 2) and rows["seq_lens"].tolist() == [4, 4, 2]


def test_a_fisher_on_fewer_rows_changes_the_step(ray_session):
    """The mechanism acts: the same first iteration with the Fisher on every 3rd row
    takes another step size than on every row."""
    sizes = []
    for subsample in (1, 3):
        algorithm = build("matrpo", fisher_subsample=subsample)
        try:
            actors = actor_results(algorithm.train())
            sizes.append([values["tr_step_size"] for values in actors.values()])
        finally:
            algorithm.stop()
    assert sizes[0] != sizes[1]


def test_a_fisher_subsample_below_one_is_refused_by_name():
    with pytest.raises(ConfigError, match="fisher_subsample"):
        algos.matrpo(fisher_subsample=0).settings("toy:coordination")


def actor_results(result):
    return {
        mid: values
        for mid, values in result["learners"].items()
        if isinstance(values, dict) and "tr_accepted" in values
    }


@pytest.mark.parametrize(
    ("name", "env"),
    [
        ("itrpo", "toy:coordination"),
        ("matrpo", "toy:coordination"),
        ("hatrpo", "toy:coordination"),
        ("efx_hatrpo", "toy:coordination"),
        ("matrpo", "toy:continuous_target"),
        ("matrpo+fisher_subsample", "toy:coordination"),
        pytest.param("itrpo", "toy:continuous_target", marks=pytest.mark.slow),
        pytest.param("hatrpo", "toy:continuous_target", marks=pytest.mark.slow),
    ],
)
def test_the_kl_after_every_accepted_step_is_within_the_threshold(ray_session, name, env):
    name, _, subsampled = name.partition("+")
    algorithm = build(name, env, **({"fisher_subsample": 3} if subsampled else {}))
    delta = algos.get(name, hyperparam_source="toy").settings(env).kl_threshold
    accepted = 0
    try:
        for _ in range(4):
            result = algorithm.train()
            actors = actor_results(result)
            assert actors, "no actor took a trust-region step"
            for values in actors.values():
                assert values["tr_line_search_steps"] >= 1
                if values["tr_accepted"] == 1.0:
                    accepted += 1
                    assert 0.0 < values["tr_kl"] <= delta
                    assert values["tr_improvement"] > 0.0
                else:
                    assert values["tr_kl"] == 0.0
            row = progress_row(result, ALGORITHMS[name])
            assert 0.0 <= row["tr_accept_rate"] <= 1.0
            assert math.isfinite(row["tr_kl"]) and row["tr_kl"] <= delta
    finally:
        algorithm.stop()
    assert accepted > 0


@pytest.mark.parametrize("name", ["matrpo", "itrpo"])
def test_a_rejected_step_leaves_the_actor_as_it_was_and_the_values_still_learn(ray_session, name):
    # A step to KL 10 with one candidate gains far less than its linear prediction
    # (accept_ratio 0.999): the line search rejects it and restores the parameters.
    algorithm = build(name, kl_threshold=10.0, accept_ratio=0.999, line_search_steps=1)
    try:
        learner = local_learner(algorithm)
        modules = {mid: plain_module(learner.module, mid) for mid in learner.module.keys()}  # noqa: SIM118

        def snapshot():
            return {
                mid: {n: p.detach().clone() for n, p in module.named_parameters()}
                for mid, module in modules.items()
            }

        before = snapshot()
        result = algorithm.train()
        after = snapshot()
        actors = actor_results(result)
        assert actors
        for mid, values in actors.items():
            assert values["tr_accepted"] == 0.0 and values["tr_line_search_steps"] == 1.0
            policy = {n for n, p in modules[mid].named_parameters() if any(
                p is q for q in policy_parameters(modules[mid]))}  # fmt: skip
            assert policy
            assert all(torch.equal(after[mid][n], before[mid][n]) for n in policy)
        # The value functions took their SGD epochs: the critic modules (matrpo) or the
        # actors' own value heads (itrpo).
        value_params = [
            (mid, n)
            for mid, params in before.items()
            for n in params
            if is_critic_module(mid) or n.startswith(VALUE_PARAMETER_PREFIXES)
        ]
        assert value_params
        assert any(not torch.equal(after[m][n], before[m][n]) for m, n in value_params)
    finally:
        algorithm.stop()


def test_hatrpo_steps_every_policy_in_a_drawn_order_with_the_factor(ray_session):
    algorithm = build("hatrpo")
    try:
        result = algorithm.train()
        learner = local_learner(algorithm)
        actors = sorted(actor_results(result))
        assert sorted(learner.last_order) == actors and len(actors) == 2
        # The first policy in the order has M = 1 on every row.
        assert result["learners"][learner.last_order[0]][FACTOR_MEAN] == pytest.approx(1.0)
    finally:
        algorithm.stop()


def test_itrpo_refuses_a_value_head_sharing_the_actor_encoder():
    with pytest.raises(ConfigError, match="vf_share_layers.*must be false"):
        algos.itrpo(vf_share_layers=True).settings("toy:coordination")


def test_trust_region_runs_resume_from_a_checkpoint(ray_session, tmp_path):
    algo = algos.matrpo(hyperparam_source="toy", **TOY)
    first = algo.fit("toy:coordination", stop={"training_iteration": 2}, local_dir=tmp_path)
    resumed = algo.fit(
        "toy:coordination",
        stop={"training_iteration": 3},
        local_dir=tmp_path,
        resume_from=first.checkpoint_path,
    )
    assert [row["training_iteration"] for row in resumed.progress] == [3]
    assert resumed.progress[0]["tr_accept_rate"] >= 0.0


@pytest.mark.parametrize(
    "name", ["matrpo", *(pytest.param(n, marks=pytest.mark.slow) for n in ("itrpo", "hatrpo"))]
)
def test_two_data_parallel_learners_take_the_same_trust_region_step(ray_session, name):
    algorithm = two_learner_algorithm(name)
    delta = algos.get(name, hyperparam_source="toy").settings("toy:coordination").kl_threshold
    try:
        accepted = 0
        for _ in range(3):
            result = algorithm.train()
            for values in actor_results(result).values():
                accepted += values["tr_accepted"] == 1.0
                assert values["tr_kl"] <= delta
        assert accepted > 0
        # The gradient, Fisher-vector products and line-search values are summed over
        # the learners' shares: both learners hold the same weights after 3 iterations.
        assert_learners_identical(algorithm)
    finally:
        algorithm.stop()
