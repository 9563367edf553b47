"""Adding a hyperparameter takes one YAML key and one dataclass field: the value then
reaches the learner, both EFX connectors and the callbacks, by attribute."""

import dataclasses

import pytest
import yaml

from marllib_ext import algos
from marllib_ext.algos.api import with_episode_end_callback
from marllib_ext.algos.efx.settings import EFXSettings
from marllib_ext.algos.registry import ALGORITHMS
from marllib_ext.configs import algo_files as algo_config
from marllib_ext.postprocessing.budget_connector import BudgetObservationConnector
from marllib_ext.rllib_compat import connectors_of, env_to_module, settings_of


@dataclasses.dataclass(frozen=True)
class ToyKnobSettings(EFXSettings):
    toy_knob: int  # the one new dataclass field


def log_toy_knob(*, env_runner, metrics_logger, **kwargs):
    metrics_logger.log_value("toy_knob_seen", settings_of(env_runner.config).toy_knob)


@pytest.fixture
def efx_mappo_with_a_toy_knob(tmp_path, monkeypatch):
    # The one new YAML key, in a copy of the algorithm configs.
    for path in algo_config.ALGO_CONFIG_DIR.glob("*.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    yaml_path = tmp_path / "efx_mappo.yaml"
    data = yaml.safe_load(yaml_path.read_text())
    data.setdefault("common", {})["toy_knob"] = 7
    yaml_path.write_text(yaml.safe_dump(data))
    monkeypatch.setattr(algo_config, "ALGO_CONFIG_DIR", tmp_path)
    spec = ALGORITHMS["efx_mappo"]
    monkeypatch.setitem(
        ALGORITHMS, "efx_mappo", dataclasses.replace(spec, settings_class=ToyKnobSettings)
    )


def test_a_new_key_reaches_learner_connectors_and_callbacks(ray_session, efx_mappo_with_a_toy_knob):
    algo = algos.get(
        "efx_mappo",
        "toy",
        num_env_runners=0,
        train_batch_size=100,
        minibatch_size=50,
        num_epochs=1,
    )
    assert algo.settings("toy:coordination").toy_knob == 7
    with pytest.raises(Exception, match="toy_knob"):
        algos.get("efx_mappo", toy_knob="seven").settings("toy:coordination")
    config = with_episode_end_callback(algo.rllib_config("toy:coordination", seed=0), log_toy_knob)
    algorithm = config.build_algo()
    try:
        result = algorithm.train()
        results = algorithm.learner_group.foreach_learner(
            lambda learner: (
                learner.settings.toy_knob,
                [c.settings.toy_knob for c in learner.advantage_connectors()],
            )
        )
        learner_sees = next(iter(results)).get()
        budget_connectors = connectors_of(
            env_to_module(algorithm.env_runner), BudgetObservationConnector
        )
    finally:
        algorithm.stop()
    assert learner_sees == (7, [7])
    assert isinstance(budget_connectors[0].settings, ToyKnobSettings)
    assert budget_connectors[0].settings.toy_knob == 7
    assert result["env_runners"]["toy_knob_seen"] == 7
