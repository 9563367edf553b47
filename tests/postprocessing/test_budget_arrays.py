"""``BudgetArrays``, EFX's budget on the batched rollout, against the budget connector's
rules: each world's z follows ``budget_path`` of its team's intrinsic rewards from the
``z_0`` drawn at its episode start, every agent sees its own team's z, and the episode
sums the outer loop reads are logged where episodes end."""

from types import SimpleNamespace

import numpy as np
import pytest
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from marllib_ext.envs.arrays import WorldArrays
from marllib_ext.ops.efx import budget_path
from marllib_ext.postprocessing.budget_arrays import (
    DEPLOY_EPISODES_DONE,
    DEPLOY_EXTRINSIC_RETURN_SUM,
    EPISODES_DONE,
    PER_TEAM,
    TEAM_EXTRINSIC_RETURN_SUM,
    TEAM_INTRINSIC_RETURN_SUM,
)
from marllib_ext.postprocessing.budget_connector import BudgetObservationConnector
from marllib_ext.postprocessing.budget_input import BudgetInput, TeamBudget

AGENTS = ["a", "b", "c"]  # a, b: team red; c: team blue
COEF = 0.5


def _connector(deploy_fraction=0.5):
    settings = SimpleNamespace(
        team_budgets=(
            TeamBudget("red", ("a", "b"), z_low=0.0, z_high=4.0, z_init=3.0),
            TeamBudget("blue", ("c",), z_low=1.0, z_high=2.0, z_init=2.0),
        ),
        intrinsic_coef=COEF, lr_z=0.1, z_optimizer="sgd", z_ext_scale=1.0,
        z_sampling="uniform", z_deploy_fraction=deploy_fraction,
    )  # fmt: skip
    return BudgetObservationConnector(settings=settings, seed=7)


def _observations(num_envs):
    return WorldArrays(
        observations={a: np.full((num_envs, 2), i, np.float32) for i, a in enumerate(AGENTS)}
    )


def test_each_world_follows_budget_path_of_its_teams_intrinsic_rewards():
    T, B = 6, 3
    rng = np.random.default_rng(0)
    logp = -rng.uniform(0.0, 1.5, size=(T, B, 3))
    acted = np.ones((T, B, 3), bool)
    acted[3:, 1, 1] = False  # b of world 1 dies after step 2: its log-prob stops counting
    ended = np.zeros((T, B), bool)
    ended[3, 2] = True  # world 2 starts a new episode after step 3
    connector = _connector()
    arrays = connector.array_form(AGENTS, B)
    metrics = MetricsLogger()
    every = np.arange(B)
    arrays.start(every)
    seen = []  # (T, B, 3) the raw z each agent saw
    z0 = [arrays.z0.copy()]
    for t in range(T):
        obs = arrays.extend(_observations(B)).observations
        seen.append([arrays.inputs[k].read(obs[a]) for a, k in zip(AGENTS, [0, 0, 1], strict=True)])
        assert obs["a"].shape == (B, 3) and np.all(obs["c"][:, :2] == 2.0)  # appended
        arrays.step(
            logp=logp[t], rewards=np.ones((B, 3)), acted=acted[t], ended=ended[t],
            metrics=metrics, observations=_observations(B).observations,
        )  # fmt: skip
        if ended[t].any():
            arrays.start(np.flatnonzero(ended[t]))
            z0.append(arrays.z0.copy())
    seen = np.moveaxis(np.array(seen), 2, 1)  # (T, B, 3)
    for world in range(B):
        for k, (_team, members, low, high) in enumerate(
            [("red", [0, 1], 0.0, 4.0), ("blue", [2], 1.0, 2.0)]
        ):
            delta = -COEF * np.where(acted, logp, 0.0)[:, world, members].sum(-1)
            pieces = [(0, T)] if world != 2 else [(0, 4), (4, T)]
            for piece, (start, stop) in enumerate(pieces):
                expected = budget_path(
                    delta[start:stop], z0=z0[piece][world, k], z_low=low, z_high=high
                )
                for member in members:
                    np.testing.assert_allclose(seen[start:stop, world, member], expected, atol=1e-5)
    # z_0 is drawn within each team's range, and the draw after a reset is new.
    assert np.all((z0[0][:, 0] >= 0.0) & (z0[0][:, 0] <= 4.0))
    assert z0[1][2, 0] != z0[0][2, 0]
    assert metrics.peek(EPISODES_DONE) == 1
    assert metrics.peek(TEAM_EXTRINSIC_RETURN_SUM) == pytest.approx(12.0)  # 4 steps, 3 agents
    intrinsic = -COEF * logp[:4, 2].sum()
    assert metrics.peek(TEAM_INTRINSIC_RETURN_SUM) == pytest.approx(intrinsic)


def test_deployment_episodes_start_at_each_controllers_budget_and_log_per_team():
    B = 4
    connector = _connector(deploy_fraction=1.0)
    arrays = connector.array_form(AGENTS, B)
    metrics = MetricsLogger()
    arrays.start(np.arange(B))
    np.testing.assert_array_equal(arrays.z0, [[3.0, 2.0]] * B)
    rewards = np.array([[1.0, 2.0, 10.0]] * B)
    ended = np.array([True, True, False, False])
    arrays.step(
        logp=np.zeros((B, 3)), rewards=rewards, acted=np.ones((B, 3), bool), ended=ended,
        metrics=metrics, observations=_observations(B).observations,
    )  # fmt: skip
    assert metrics.peek(DEPLOY_EPISODES_DONE) == 2
    assert metrics.peek(DEPLOY_EXTRINSIC_RETURN_SUM) == pytest.approx(26.0)
    assert metrics.peek((PER_TEAM, "red", DEPLOY_EXTRINSIC_RETURN_SUM)) == pytest.approx(6.0)
    assert metrics.peek((PER_TEAM, "blue", DEPLOY_EXTRINSIC_RETURN_SUM)) == pytest.approx(20.0)
    # The connector's controllers are the array form's: a broadcast budget applies.
    connector.set_state(
        {"controllers": {"red": {**connector.controllers["red"].get_state(), "z": 1.5}}}
    )
    arrays.start(np.array([0]))
    assert arrays.z0[0, 0] == 1.5


def test_an_agent_outside_every_team_budget_is_named():
    with pytest.raises(ValueError, match=r"\['d'\]"):
        _connector().array_form([*AGENTS, "d"], 2)


def test_budget_input_reads_back_what_it_appended():
    budget = BudgetInput(1.0, 3.0)
    appended = budget.append(np.zeros((2, 1)), np.array([1.5, 2.5]))
    np.testing.assert_allclose(budget.read(appended), [1.5, 2.5])


# ---- the per-world connector: one-world states moved by the same tracker -----------------
def _completed_steps(episode, agent):
    """``{env index: log pi}`` of each of ``agent``'s steps, keyed by the env index of
    its next observation (where RLlib completes the step), read through RLlib's API."""
    sa_episode = episode.agent_episodes[agent]
    observed = [
        index
        for index, step in enumerate(episode.env_t_to_agent_t[agent].get(slice(0, None)))
        if step != episode.SKIP_ENV_TS_TAG
    ]
    logp = np.asarray(sa_episode.get_extra_model_outputs("action_logp"), np.float64)
    return dict(zip(observed[1:], logp, strict=True))


@pytest.mark.parametrize("env", ["toy:coordination", "toy:take_turns"])
def test_per_world_episodes_move_z_by_every_teammates_completed_step(ray_session, env):
    """Each agent's observed z is ``budget_path`` of the team's intrinsic rewards, a step
    counted where it completes (the agent observes again): on turn-taking envs a
    teammate's move counts too. The episode's logged sums are its agents' totals."""
    from marllib_ext import algos
    from marllib_ext.algos.efx.callbacks import budget_connector
    from marllib_ext.postprocessing.budget_connector import STATE_KEY

    config = algos.efx_mappo(
        hyperparam_source="toy", z_sampling="uniform", z_deploy_fraction=0.1
    ).rllib_config(env, seed=0, num_env_runners=0, num_envs_per_env_runner=2, sampler="per_world")
    algorithm = config.build_algo()
    try:
        runner = algorithm.env_runner
        assert runner.sampling.startswith("sampling: RLlib's per-world episodes")
        episodes = runner.sample(num_episodes=4)
        connector = budget_connector(runner)
    finally:
        algorithm.stop()
    (budget,) = connector.settings.team_budgets
    coef = connector.intrinsic_coef
    moved = 0
    for episode in episodes:
        agents = sorted(episode.agent_episodes)
        completed = [_completed_steps(episode, agent) for agent in agents]
        delta = np.zeros(episode.env_t + 1)
        for steps in completed:
            for index, logp in steps.items():
                delta[index] += -coef * logp
        state = episode.custom_data[STATE_KEY]
        # z at every env index: before the steps completing after it
        z = budget_path(
            np.append(delta[1:], 0.0), z0=state.z0[0, 0], z_low=budget.z_low, z_high=budget.z_high
        )
        for agent in agents:
            sa_episode = episode.agent_episodes[agent]
            observed = [
                index
                for index, step in enumerate(episode.env_t_to_agent_t[agent].get(slice(0, None)))
                if step != episode.SKIP_ENV_TS_TAG
            ]
            observations = sa_episode.get_observations()
            if isinstance(observations, list):  # an episode not in numpy form
                observations = {k: np.stack([o[k] for o in observations]) for k in observations[0]}
            if isinstance(observations, dict):  # masked: the budget is in "observation"
                observations = observations["observation"]
            seen = budget.input.read(np.asarray(observations))
            np.testing.assert_allclose(seen, z[observed], rtol=1e-5, atol=1e-4)
        moved += z[-1] < z[0]
        np.testing.assert_allclose(
            state.intrinsic[0], [-coef * sum(steps.values()) for steps in completed], rtol=1e-6
        )
        np.testing.assert_allclose(
            state.returns[0], [episode.agent_episodes[a].get_return() for a in agents]
        )
    assert moved  # the budget moved in some episode (the test can tell paths apart)


def test_episodes_started_at_either_end_of_the_range_are_summed_apart():
    from marllib_ext.postprocessing.budget_arrays import (
        HIGH_EPISODES_DONE,
        HIGH_INTRINSIC_RETURN_SUM,
        LOW_EPISODES_DONE,
        LOW_INTRINSIC_RETURN_SUM,
        log_episode_sums,
    )

    connector = _connector()
    metrics = MetricsLogger()
    # Four ended episodes: red starts at z_low = 0, z_high = 4, in between, and z_high
    # in a deployment episode (which neither sum takes).
    log_episode_sums(
        metrics,
        budgets=connector.settings.team_budgets,
        agents=AGENTS,
        returns=np.zeros((4, 3)),
        intrinsic=np.array([[1.0, 2.0, 9.0], [3.0, 4.0, 9.0], [5.0, 5.0, 9.0], [7.0, 7.0, 9.0]]),
        deploy=np.array([False, False, False, True]),
        z0=np.array([[0.0, 1.5], [4.0, 1.5], [2.0, 1.5], [4.0, 1.5]]),
    )
    red = (PER_TEAM, "red")
    assert metrics.peek((*red, LOW_INTRINSIC_RETURN_SUM)) == pytest.approx(3.0)
    assert metrics.peek((*red, LOW_EPISODES_DONE)) == 1
    assert metrics.peek((*red, HIGH_INTRINSIC_RETURN_SUM)) == pytest.approx(7.0)
    assert metrics.peek((*red, HIGH_EPISODES_DONE)) == 1
