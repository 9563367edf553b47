"""Team episodes for team replay come from rollout blocks only: the ones
``TeamEpisodeAssembler`` builds from a batched rollout's arrays, and the ones it builds
from RLlib's per-world episodes read as blocks (``team_episodes_of_chunks``), equal row
for row a slow reference reading the same steps through RLlib's episode API
(``team_episode_reference``), on agents that move together, take turns, arrive late and
die; episodes cut across ``sample()`` calls join into the same arrays; a GRU agent acts
on the arrays with its state carried per world and restarted with the world's episode."""

import numpy as np
import pytest
import torch

from marllib_ext import algos, make_env
from marllib_ext.rllib_compat import reset_before_next_sample
from marllib_ext.rollout.team_episodes import TeamEpisodeAssembler, team_episodes_of_chunks
from tests.rollout.team_episode_reference import reference_team_episode

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WORLDS = 4
SMALL = {"batch_episode": 4, "rnn_hidden_dim": 8, "hiddens": [16], "mixer_embed_dim": 8}
FIELDS = ("obs", "state", "actions", "rewards", "present", "agent_terminated", "action_mask")

CASES = {
    # deaths, action masks, the simulator's state, GRU agents with id and last action
    "smax": ("qmix", "pymarl2", "smax:3m", {}),
    # action masks in a plain PettingZoo env's observations (copies of it)
    "legal_moves": ("vdn", None, "toy:legal_moves", {"obs_agent_id": True}),
    # a batched simulator the test extra installs, time-limit ends
    "vmas": ("iql", None, "vmas:navigation", {"obs_last_action": True}),
    # copies of MPE: time-limit ends, costs in the infos
    "mpe": ("vdn", None, "mpe:simple_spread", {}),
}
PER_WORLD_CASES = {
    # AEC turns: rewards between an agent's turns, final observations of idle players
    "take_turns": ("qmix", None, "toy:take_turns", {}),
    # an agent that arrives at step 2 and one that dies at step 3
    "come_and_go": ("vdn", None, "toy:come_and_go", {}),
}
ENV_ARGS = {
    "vmas:navigation": {"max_steps": 15, "continuous_actions": False},
    "mpe:simple_spread": {"max_cycles": 15},
}


def _algorithm(case: str):
    name, source, env, settings = {**CASES, **PER_WORLD_CASES}[case]
    if env.startswith("smax:"):
        pytest.importorskip("jaxmarl", reason="the smax extra is not installed")
    if env.startswith("vmas:"):
        pytest.importorskip("vmas", reason="the vmas extra is not installed")
    algo = algos.get(name, source, **SMALL, **settings)
    config = algo.rllib_config(
        make_env(env, **ENV_ARGS.get(env, {})),
        seed=3,
        num_env_runners=0,
        num_envs_per_env_runner=WORLDS,
    )
    return config.build_algo()


def _sampled(case: str, steps: int):
    """``(runner, block arrays, RLlib chunks)`` of one ``steps``-step block from fresh
    worlds, both forms of the same sampled steps."""
    algorithm = _algorithm(case)
    runner = algorithm.env_runner
    rollout = runner.array_rollout
    assert runner.sampling == "sampling: team episodes from arrays"
    reset_before_next_sample(runner)
    rollout.reset()
    block = rollout._run(steps, True, False)
    return algorithm, rollout._block(block), rollout._episodes(block)


def _assert_equal(got, expected):
    assert got.length == expected.length and got.terminated == expected.terminated
    for field in FIELDS:
        mine, theirs = getattr(got, field), getattr(expected, field)
        if theirs is None:
            assert mine is None, field
            continue
        np.testing.assert_array_equal(mine, theirs, err_msg=field)


@pytest.mark.parametrize("case", sorted(CASES))
def test_assembled_episodes_are_the_ones_read_from_rllib_episodes(ray_session, case):
    algorithm, arrays, chunks = _sampled(case, 40)
    try:
        runner = algorithm.env_runner
        agents, obs_dim = runner.team_agents, runner.team_obs_dim
        whole = [c for c in chunks if c.is_done and c.env_t_started == 0]
        expected = [reference_team_episode(c, agents, obs_dim) for c in whole]
        got = TeamEpisodeAssembler(agents, obs_dim).add(arrays)
        read_as_blocks = team_episodes_of_chunks(whole, agents, obs_dim)
    finally:
        algorithm.stop()
    assert len(got) == len(expected) >= WORLDS
    for mine, read, theirs in zip(got, read_as_blocks, expected, strict=True):
        _assert_equal(mine, theirs)
        _assert_equal(read, theirs)
    if case == "smax":  # the case covers deaths and masks
        assert any(e.agent_terminated[:-1].any() for e in got)
        assert all(e.action_mask is not None for e in got)


@pytest.mark.parametrize("case", sorted(PER_WORLD_CASES))
def test_per_world_episodes_read_as_blocks_are_the_reference_episodes(ray_session, case):
    algorithm = _algorithm(case)
    try:
        runner = algorithm.env_runner
        agents, obs_dim = runner.team_agents, runner.team_obs_dim
        episodes = [e.to_numpy() for e in runner.sample(num_episodes=2 * WORLDS)]
        stored = runner.sample()  # what training stores, through the runner
    finally:
        algorithm.stop()
    expected = [reference_team_episode(e, agents, obs_dim) for e in episodes]
    got = team_episodes_of_chunks(episodes, agents, obs_dim)
    assert len(got) == len(expected) >= WORLDS
    for mine, theirs in zip(got, expected, strict=True):
        _assert_equal(mine, theirs)
    assert len(stored) >= WORLDS and all(e.length > 0 for e in stored)
    if case == "come_and_go":  # an arrival and a death in every episode
        assert all(not e.present[:2, 2].any() and e.present[2, 2] for e in got)
        assert all(e.agent_terminated[3, 1] for e in got)
    if case == "take_turns":  # rewards credited between an agent's turns
        assert any((e.rewards != 0).sum() > (e.present[:-1] * (e.rewards != 0)).sum() for e in got)


def test_a_chunk_that_is_not_a_whole_episode_is_refused(ray_session):
    algorithm = _algorithm("come_and_go")
    try:
        runner = algorithm.env_runner
        agents, obs_dim = runner.team_agents, runner.team_obs_dim
        (episode,) = runner.sample(num_episodes=1)
    finally:
        algorithm.stop()
    tail = episode.to_numpy().slice(slice(3, None))
    with pytest.raises(ValueError, match="team replay stores whole episodes"):
        team_episodes_of_chunks([tail], agents, obs_dim)


@pytest.mark.parametrize("case", ["smax", "legal_moves"])
def test_episodes_cut_between_calls_join_into_the_same_arrays(ray_session, case):
    algorithm, arrays, _ = _sampled(case, 40)
    try:
        runner = algorithm.env_runner
        agents, obs_dim = runner.team_agents, runner.team_obs_dim
    finally:
        algorithm.stop()
    whole = TeamEpisodeAssembler(agents, obs_dim).add(arrays)
    for cut in (1, 7, 23):
        assembler = TeamEpisodeAssembler(agents, obs_dim)
        joined = assembler.add(arrays.steps(0, cut))
        joined += assembler.add(arrays.steps(cut))
        assert len(joined) == len(whole)
        for mine, theirs in zip(
            sorted(joined, key=_contents), sorted(whole, key=_contents), strict=True
        ):
            _assert_equal(mine, theirs)


def _contents(episode) -> bytes:
    """An order for episodes: their arrays' bytes."""
    return b"".join(np.ascontiguousarray(getattr(episode, f)).tobytes() for f in FIELDS[:4])


def test_a_world_restarted_by_the_rollout_drops_its_unfinished_steps(ray_session):
    algorithm, arrays, _ = _sampled("legal_moves", 30)
    try:
        runner = algorithm.env_runner
        agents, obs_dim = runner.team_agents, runner.team_obs_dim
    finally:
        algorithm.stop()
    assembler = TeamEpisodeAssembler(agents, obs_dim)
    assembler.add(arrays.steps(0, 3))  # every world mid-episode
    assert len(assembler.pending) == WORLDS
    # The same steps again: every world starts at the block's first step.
    again = assembler.add(arrays)
    assert len(again) == len(TeamEpisodeAssembler(agents, obs_dim).add(arrays))


def test_gru_agents_act_with_a_state_per_world_restarted_with_its_episode(ray_session):
    """The runner's ``t`` reaches the epsilon schedule, and a GRU agent's state on the
    arrays is, for each world, the state of stepping its episode's observations from
    the initial state."""
    pytest.importorskip("jaxmarl", reason="the smax extra is not installed")
    algorithm = _algorithm("smax")
    try:
        runner = algorithm.env_runner
        rollout = runner.array_rollout
        module = runner.module["shared"]
        runner.num_env_steps_sampled_lifetime = 50_000
        reset_before_next_sample(runner)
        rollout.reset()
        seen = []
        schedule = module.epsilon
        module.epsilon = lambda t: seen.append(t) or schedule(t)
        block = rollout._run(25, True, False)
        del module.epsilon
        arrays = rollout._block(block)
        state = rollout.recurrent.states["shared"]["h"]  # (agents x worlds, H)
        agents = list(arrays.agents)
        for k, agent in enumerate(agents):
            for world in range(WORLDS):
                starts = np.flatnonzero(arrays.starts[:, world])
                first = starts[-1] if len(starts) else 0
                obs = torch.as_tensor(arrays.observations[agent][first:, world])
                with torch.no_grad():
                    hidden = module.get_initial_state()["h"][None]
                    for row in obs:
                        hidden = module.gru(module.encoder(row[None]), hidden)
                torch.testing.assert_close(state[k * WORLDS + world], hidden[0])
    finally:
        algorithm.stop()
    # One schedule call per step, at the runner's lifetime steps plus this call's.
    assert seen == [50_000 + WORLDS * t for t in range(25)]
