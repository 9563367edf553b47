"""The declared update schedules: phases checked at construction, the keys each reads,
the keys an algorithm refuses with the reason, and the YAML defaults that follow."""

import dataclasses

import pytest

from marllib_ext import algos
from marllib_ext.algos.config import load_algo_yaml
from marllib_ext.algos.ppo.schedule import (
    ACTORS,
    CRITICS,
    HATRPO,
    PPO,
    SGD,
    TRPO,
    TRUST_REGION,
    Phase,
    ignored_keys,
    rllib_phase,
    schedule_table,
)
from marllib_ext.algos.registry import ALGORITHMS
from marllib_ext.errors import ConfigError

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
        "vf_loss_coeff",
        "vf_clip_param",
    }
    assert set(HATRPO[0].reads) == {
        "kl_threshold",
        "cg_iterations",
        "cg_damping",
        "backtrack_coef",
        "line_search_steps",
        "accept_ratio",
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
