"""Small learning tests: returns a uniformly random team cannot reach."""

import pytest

from marllib_ext import algos

# toy:coordination (2 agents, 3 targets, 10 steps): random team 10/9 = 1.11 per agent,
# coordinated team 10.
RANDOM_AGENT_RETURN = 10 / 9


@pytest.mark.parametrize(
    "name,share_policy",
    [("mappo", "all"), pytest.param("ippo", "individual", marks=pytest.mark.slow)],
)
def test_learns_coordination_beyond_random(ray_session, tmp_path, name, share_policy):
    result = algos.get(name).fit(
        "toy:coordination",
        stop={"training_iteration": 20},
        share_policy=share_policy,
        seed=0,
        local_dir=tmp_path,
        num_env_runners=0,
    )
    final = result.final["agent_return_mean"]
    assert final > 5 * RANDOM_AGENT_RETURN, result.progress
    assert result.checkpoint_path is not None and result.checkpoint_path.exists()
