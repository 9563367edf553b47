"""The one sampler choice: made once per runner by ``choose_sampler``, frozen, logged as
the runner's ``sampling`` line; the ``sampler`` setting asks for a slower path by name
and never forces a faster one; a bad value is refused naming the field."""

import dataclasses

import pytest

from marllib_ext import algos
from marllib_ext.errors import ConfigError
from marllib_ext.rollout.sampler import (
    BLOCKS,
    CHUNKS_FROM_ARRAYS,
    PER_WORLD_EPISODES,
    SamplerChoice,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SMALL = {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1}


def test_a_choice_is_frozen_and_describes_itself():
    choice = SamplerChoice(CHUNKS_FROM_ARRAYS, "a reason")
    assert choice.description() == "sampling: episode chunks built from arrays (a reason)"
    assert choice.uses_arrays and not choice.hands_blocks
    assert SamplerChoice(BLOCKS).description() == "sampling: rollout blocks"
    assert not SamplerChoice(PER_WORLD_EPISODES, "why").uses_arrays
    with pytest.raises(dataclasses.FrozenInstanceError):
        choice.kind = BLOCKS


def test_an_unknown_sampler_is_refused_by_name():
    with pytest.raises(ConfigError, match="sampler must be one of"):
        algos.mappo(**SMALL).rllib_config("mpe:simple_spread", sampler="arrays")


@pytest.mark.parametrize(
    "sampler,kind",
    [("auto", BLOCKS), ("episode_chunks", CHUNKS_FROM_ARRAYS), ("per_world", PER_WORLD_EPISODES)],
)
def test_the_setting_picks_the_path_once(ray_session, sampler, kind):
    config = algos.mappo(**SMALL).rllib_config(
        "mpe:simple_spread", seed=0, num_env_runners=0, num_envs_per_env_runner=2,
        sampler=sampler,
    )  # fmt: skip
    algorithm = config.build_algo()
    try:
        runner = algorithm.env_runner
        assert runner.sampler_choice.kind == kind
        assert runner.sampling == runner.sampler_choice.description()
        assert (runner.array_rollout is not None) == (kind != PER_WORLD_EPISODES)
        if runner.array_rollout is not None:
            assert runner.array_rollout.hands_blocks == (kind == BLOCKS)
        algorithm.train()  # every path trains, the learner reading blocks
        assert runner.sampler_choice.kind == kind
    finally:
        algorithm.stop()
