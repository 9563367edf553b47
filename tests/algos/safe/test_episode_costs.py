"""A team's episode cost is one computation on both samplers: the batched runner's
tally (rollout blocks) and the per-world ``on_episode_end`` callback (episode chunks
read as blocks) both sum ``ops.rollout.team_step_costs``, and both equal a slow
reference that reads each env step's ``info["team_cost"]`` of any observing team agent
through RLlib's episode API, on one team (MPE, where agents collide) and two."""

import numpy as np
import pytest

from marllib_ext import algos, make_env
from marllib_ext.algos.safe import episode_team_cost
from marllib_ext.envs.adapter import TEAM_COST_KEY
from marllib_ext.ops.rollout import episode_pieces
from marllib_ext.rllib_compat import reset_before_next_sample
from marllib_ext.rollout.episode_steps import chunk_step_infos
from tests.algos.safe import test_safe_teams  # noqa: F401  (registers test:two_team_costs)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WORLDS = 4
CASES = {
    "mpe:simple_spread": {"max_cycles": 10},
    "test:two_team_costs": {},
}


def _reference_cost(chunk, agents) -> float:
    """Each env step's team cost from the info of a team agent observing after it."""
    infos = chunk_step_infos(chunk, agents)[1:]
    return float(sum((info or {}).get(TEAM_COST_KEY, 0.0) for info in infos))


@pytest.mark.parametrize("env", sorted(CASES))
def test_block_tally_and_chunks_give_each_teams_episode_cost(ray_session, env):
    config = algos.mappo_lag(train_batch_size=200, minibatch_size=100, num_epochs=1)
    algorithm = config.rllib_config(
        make_env(env, **CASES[env]), seed=1, num_env_runners=0, num_envs_per_env_runner=WORLDS,
        share_policy="group",
    ).build_algo()  # fmt: skip
    try:
        runner = algorithm.env_runner
        rollout = runner.array_rollout
        assert rollout is not None and rollout.hands_blocks, runner.sampling
        reset_before_next_sample(runner)
        rollout.reset()
        sampled = rollout._run(25, True, False)
        block, chunks = rollout._block(sampled), rollout._episodes(sampled)
        tally = rollout.tally
        tally.reset()
        ended = []
        tally.array_forms = [lambda episodes, **_: ended.append(episodes)]
        tally.add(block, np.zeros(WORLDS), np.arange(len(block.terminated), dtype=float))
    finally:
        algorithm.stop()
    teams = make_env(env, **CASES[env]).layout.teams
    whole = [c for c in chunks if c.is_done and c.env_t_started == 0]
    (episodes,) = ended
    assert len(whole) == len(episodes.returns) >= WORLDS
    # The chunks come world by world; the tally logs episodes in the order they end.
    worlds, _, stops, done = episode_pieces(block.terminated | block.truncated)
    pieces = [(int(stop), int(w)) for w, stop, d in zip(worlds, stops, done, strict=True) if d]
    assert len(pieces) == len(whole)
    logged = {piece: k for k, piece in enumerate(sorted(pieces))}
    costly = 0.0
    for team, agents in teams.items():
        column = episodes.agents.index(agents[0])
        for chunk, piece in zip(whole, pieces, strict=True):
            reference = _reference_cost(chunk, agents)
            assert episode_team_cost([chunk], agents) == pytest.approx(reference), team
            assert episodes.team_costs[logged[piece], column] == pytest.approx(reference), team
            costly += reference
    assert costly > 0  # the test can tell a cost from none
