"""``random_warmup_steps`` (HARL's warmup): sample calls that start before that many
lifetime env steps act uniformly at random, without the agent modules; later ones act
with them. Shown with modules whose weights are NaN: the env refuses their actions.
Random and learned actions share the env's bounds, which the env takes unchanged."""

import numpy as np
import pytest
import torch

from marllib_ext import algos, make_env
from marllib_ext.errors import ConfigError
from marllib_ext.rollout.actions import env_actions

EPISODE_STEPS = 10
WORLDS = 2


def spread():
    return make_env("mpe:simple_spread", continuous_actions=True, max_cycles=EPISODE_STEPS)


def poison_acting_modules(algorithm) -> None:
    """NaN weights in the local runner's agent modules (no learner update syncs them
    back: ``learning_starts`` is never reached)."""

    def poison(runner):
        with torch.no_grad():
            for module in runner.module.values():
                for parameter in module.parameters():
                    parameter.fill_(float("nan"))

    algorithm.env_runner_group.foreach_env_runner(poison, local_env_runner=True)


def test_warmup_calls_act_uniformly_and_later_calls_use_the_modules(ray_session):
    settings = dict(
        random_warmup_steps=2 * WORLDS * EPISODE_STEPS,  # the first two sample calls
        learning_starts=1000,
        batch_episode=2,
        num_envs_per_env_runner=WORLDS,
        actor_hiddens=[8],
        critic_hiddens=[8],
    )
    algorithm = (
        algos.masac(**settings)
        .rllib_config(spread(), share_policy="individual", seed=0)
        .build_algo()
    )
    try:
        poison_acting_modules(algorithm)
        for _ in range(2):
            progress = algos.get_algo_spec("masac").progress(algorithm.train())
            assert progress["replay_random_episodes"] == WORLDS
        actions = algorithm.store.arrays["actions"][: 2 * WORLDS, :EPISODE_STEPS]
        # simple_spread's continuous actions, Box(0, 1, (5,)): mean 1/2, variance 1/12.
        assert np.isfinite(actions).all() and actions.min() >= 0 and actions.max() <= 1
        assert abs(actions.mean() - 0.5) < 0.05 and abs(actions.var() - 1 / 12) < 0.02
        # Past the warm-up the NaN modules act, and the env refuses their actions.
        with pytest.raises(AssertionError, match="nan action"):
            algorithm.train()
    finally:
        algorithm.stop()


@pytest.mark.parametrize("name", ["qmix", "maddpg", "masac"])
def test_a_negative_warmup_is_refused_by_name(name):
    env = make_env("mpe:simple_spread", continuous_actions=name != "qmix")
    with pytest.raises(ConfigError, match="random_warmup_steps"):
        algos.get(name, random_warmup_steps=-1).settings(env)


def test_the_warmup_ends_at_the_first_sample_call_at_or_past_it():
    settings = algos.masac(random_warmup_steps=8000).settings(spread())
    assert settings.acts_randomly_at(0) and settings.acts_randomly_at(7999)
    assert not settings.acts_randomly_at(8000)
    assert not algos.masac(random_warmup_steps=0).settings(spread()).acts_randomly_at(0)


@pytest.mark.parametrize("name", ["maddpg", "masac"])
def test_the_env_takes_the_actors_bounded_actions_unchanged(name):
    """The actors squash into the env's Box (simple_spread: [0, 1]); RLlib's default
    ``normalize_actions`` would map them again, as if from [-1, 1], onto [0.5, 1]."""
    env = spread()
    config = algos.get(name).rllib_config(env, share_policy="individual", seed=0)
    spaces = env.layout.action_spaces
    actions = {a: np.random.default_rng(0).uniform(0, 1, (4, 5)).astype(np.float32) for a in spaces}
    for agent, taken in env_actions(actions, spaces, config).items():
        np.testing.assert_array_equal(taken, actions[agent])
