"""The declared update schedules: phases checked at construction, the keys each reads,
the keys an algorithm refuses with the reason, and the YAML defaults that follow."""

import dataclasses

import pytest

from marllib_ext import algos
from marllib_ext.algos.ppo.schedule import (
    ACTORS,
    ALL,
    CRITICS,
    DRAWN,
    HATRPO,
    PPO,
    SGD,
    SORTED,
    TRPO,
    TRUST_REGION,
    Phase,
    ignored_keys,
    rllib_phase,
    schedule_table,
)
from marllib_ext.algos.registry import ALGORITHMS
from marllib_ext.configs.algo_files import load_algo_yaml
from marllib_ext.errors import ConfigError
from marllib_ext.policies.joint_critic import is_critic_module
from marllib_ext.rllib_compat import local_learner
from tests.helpers import sgd_overrides

ON_POLICY = [name for name, spec in ALGORITHMS.items() if spec.schedule is not None]


def test_every_on_policy_algorithm_declares_a_schedule_and_no_off_policy_one_does():
    for name, spec in ALGORITHMS.items():
        assert (spec.schedule is None) == spec.capabilities.off_policy, name


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"modules": "critic"}, "modules"),
        ({"step": "newton"}, "step"),
        ({"order": "random"}, "order"),
        ({"weighting": "m"}, "weighting"),
    ],
)
def test_a_phase_refuses_unknown_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"Phase.{field}"):
        Phase(**{"modules": ACTORS, "step": SGD, "losses": ("ppo_clip",), **kwargs})


def test_a_trust_region_phase_names_no_optimizer_keys_and_an_sgd_phase_does():
    with pytest.raises(ValueError, match="SGD and projection phases"):
        Phase(ACTORS, TRUST_REGION, ("trust_region_surrogate",))
    with pytest.raises(ValueError, match="SGD and projection phases"):
        Phase(ACTORS, SGD, ("ppo_clip",), epochs=None, lr=None)


def test_the_keys_a_phase_reads_literal():
    critics = TRPO[1]
    assert set(critics.reads) == {
        "critic_epochs",
        "critic_minibatch_size",
        "critic_lr",
        "grad_clip",
        "module_minibatches",
        "vf_loss_coeff",
        "vf_clip_param",
        "value_norm",
        "value_norm_beta",
        "huber_delta",
        "value_clip",
    }
    assert set(HATRPO[0].reads) == {
        "kl_threshold",
        "cg_iterations",
        "cg_damping",
        "backtrack_coef",
        "line_search_steps",
        "accept_ratio",
        "fisher_subsample",
    }


def test_rllib_reads_the_last_sgd_phase():
    assert rllib_phase(TRPO).lr == "critic_lr"
    assert rllib_phase(ALGORITHMS["coma"].schedule).epochs == "num_epochs"
    assert rllib_phase(PPO) is PPO[0]


def test_ignored_keys_literal():
    fields = {"lr", "entropy_coeff", "clip_param", "critic_lr", "kl_threshold", "gamma"}
    ignored = ignored_keys(TRPO, fields)
    assert set(ignored) == {"lr", "entropy_coeff", "clip_param"}  # gamma: no phase key
    assert ignored["lr"].endswith("(use critic_lr)")
    assert "actors take trust-region steps" in ignored["entropy_coeff"]
    assert ignored_keys(PPO, {"lr", "entropy_coeff", "clip_param"}) == {}


def test_an_ignored_key_keeps_its_inherited_value_unchecked():
    # matrpo inherits minibatch_size 200 (toy) but reads critic_minibatch_size only.
    settings = ALGORITHMS["matrpo"].settings(
        "toy", {"train_batch_size": 100, "critic_minibatch_size": 50}
    )
    assert settings.minibatch_size == 200 and "minibatch_size" in settings.ignored_keys
    with pytest.raises(ConfigError, match="'ignored_keys' in matrpo .* cannot be set"):
        ALGORITHMS["matrpo"].settings("toy", {"ignored_keys": ["lr"]})


@pytest.mark.parametrize(
    "name,key,reason",
    [
        ("matrpo", "entropy_coeff", "its actors take trust-region steps"),
        ("hatrpo", "num_epochs", "use critic_epochs"),
        ("itrpo", "minibatch_size", "use critic_minibatch_size"),
        ("maa2c", "clip_param", "A2C's policy gradient"),
        ("coma", "kl_coeff", "A2C's policy gradient"),
        ("mappo_focops", "use_kl_loss", "FOCOPS's loss"),
    ],
)
def test_a_key_no_phase_reads_is_an_error_naming_the_algorithm_key_and_reason(name, key, reason):
    value = getattr(ALGORITHMS[name].settings("common"), key)
    with pytest.raises(ConfigError, match=f"{key} is not used by {name}: .*{reason}"):
        algos.get(name, **{key: value}).settings("mpe:simple_spread")


def test_every_key_some_phase_reads_is_accepted():
    for name in ON_POLICY:
        spec = ALGORITHMS[name]
        defaults = spec.settings("common")
        read = {key for phase in spec.schedule for key in phase.reads}
        fields = {f.name for f in dataclasses.fields(spec.settings_class)}
        for key in sorted(read & fields):
            spec.settings("common", {key: getattr(defaults, key)})


@pytest.mark.parametrize("name", ON_POLICY)
def test_an_algorithms_own_yaml_sets_no_key_it_ignores(name):
    ignored = ALGORITHMS[name].ignored_keys()
    data = load_algo_yaml(name)
    sections = [data.get("common") or {}, *(data.get("sources") or {}).values()]
    assert not [key for section in sections for key in section if key in ignored]


def test_every_sgd_phase_of_a_schedule_shares_one_learning_rate():
    # One optimizer per module: RLlib's lr is the only one.
    for name in ON_POLICY:
        rates = {p.lr for p in ALGORITHMS[name].schedule if p.step != TRUST_REGION}
        assert len(rates) == 1, (name, rates)


def test_the_schedule_table_lists_each_phase_in_order():
    table = schedule_table({"hatrpo": HATRPO}).splitlines()
    assert len(table) == 4
    assert table[2].startswith("| `hatrpo` | 1 | actors | trust_region |")
    assert table[3].startswith("|  | 2 | critics | sgd | value |")
    assert CRITICS in table[3]


def recording_learner(learner_class, calls):
    """``learner_class`` that records ``(step kind, modules)`` of every step it takes."""

    class Recording(learner_class):
        def sgd_step(self, phase, module_batches, context):
            calls.append((phase.step, sorted(module_batches)))
            return super().sgd_step(phase, module_batches, context)

        def trust_region_step(self, phase, module_batches, context):
            calls.append((phase.step, sorted(module_batches)))
            return super().trust_region_step(phase, module_batches, context)

    return Recording


@pytest.mark.parametrize(
    "name,env",
    [
        ("happo", "toy:coordination"),
        ("hatrpo", "toy:coordination"),
        ("coma", "toy:coordination"),
        ("mappo_cup", "mpe:simple_spread"),
    ],
)
def test_an_iteration_runs_the_declared_phases_in_order(ray_session, name, env):
    spec = ALGORITHMS[name]
    share = "individual" if spec.capabilities.sequential else "all"
    small = {"train_batch_size": 100, **sgd_overrides(name, 50)}
    config = algos.get(name, hyperparam_source="toy", num_env_runners=0, **small).rllib_config(
        env, share_policy=share, seed=0
    )
    calls = []
    algorithm = config.learners(
        learner_class=recording_learner(config.learner_class, calls)
    ).build_algo()
    try:
        algorithm.train()
        learner = local_learner(algorithm)
        modules = sorted(learner.module.keys())
    finally:
        algorithm.stop()
    critics = [m for m in modules if is_critic_module(m)]
    actors = [m for m in modules if not is_critic_module(m)]
    expected = []
    for phase in spec.schedule:
        trained = {ALL: modules, ACTORS: actors, CRITICS: critics}[phase.modules]
        if phase.order == DRAWN:
            assert sorted(learner.last_order) == trained
            expected += [(phase.step, [m]) for m in learner.last_order]
        elif phase.order == SORTED:
            expected += [(phase.step, [m]) for m in trained]
        else:
            expected.append((phase.step, trained))
    assert calls == expected
