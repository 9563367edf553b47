"""Algorithms with two data-parallel learners (``num_learners=2``), and the check that
the learners hold identical weights: shared by the data-parallel and trust-region tests."""

import numpy as np

from marllib_ext import algos
from marllib_ext.algos.registry import ALGORITHMS
from marllib_ext.algos.team_replay.settings import TeamReplaySettings
from marllib_ext.rllib_compat import plain_module
from tests.helpers import sgd_overrides

BATCH = 200
COST_ENV = "mpe:simple_spread"  # the safe algorithms need info["cost"]
ENV_OF = {
    "sac_roer": "Pendulum-v1",
    "isac_roer": "toy:continuous_target",
    **{name: "toy:continuous_target" for name in ("iddpg", "maddpg", "facmac")},
    **{name: COST_ENV for name in algos.algorithms_that(needs_costs=True)},
}


def two_learner_config(name, sampler="auto", **overrides):
    settings = {"num_learners": 2, "num_env_runners": 0}
    if issubclass(ALGORITHMS[name].settings_class, TeamReplaySettings):
        settings.update(batch_episode=4, learning_starts=2)
    elif ALGORITHMS[name].capabilities.off_policy:
        settings.update(train_batch_size=64, num_steps_sampled_before_learning_starts=64)
        settings["per_type"] = "uniform"
    else:
        settings.update(
            hyperparam_source="toy", train_batch_size=BATCH, **sgd_overrides(name, BATCH // 2)
        )
    settings.update(overrides)
    share = "individual" if ALGORITHMS[name].capabilities.sequential else "all"
    return algos.get(name, **settings).rllib_config(
        ENV_OF.get(name, "toy:coordination"), share_policy=share, seed=0, sampler=sampler
    )


def two_learner_algorithm(name, sampler="auto", **overrides):
    return two_learner_config(name, sampler, **overrides).build_algo()


def module_weights(learner):
    """``{module_id: {name: array}}``: every module's state of one learner."""
    return {
        module_id: {
            name: value.detach().cpu().numpy().copy()
            for name, value in plain_module(learner.module, module_id).state_dict().items()
        }
        for module_id in list(learner.module.keys())
    }


def learner_weights(algorithm):
    return [ref.get() for ref in algorithm.learner_group.foreach_learner(module_weights)]


def assert_learners_identical(algorithm):
    first, second = learner_weights(algorithm)
    assert first.keys() == second.keys()
    for module_id, params in first.items():
        for name, value in params.items():
            np.testing.assert_array_equal(value, second[module_id][name], err_msg=name)
