import numpy as np
import pytest

from marllib_ext.postprocessing.team_layout import (
    AgentRows,
    MisalignedAgentsError,
    build_team_layout,
)


def test_rows_map_to_team_rows_per_chunk_and_module():
    # RLlib order: chunk by chunk, agents in the episode's order (not sorted).
    rows = [
        AgentRows("c0", "agent_1", "shared", 3),
        AgentRows("c0", "agent_0", "shared", 3),
        AgentRows("c1", "agent_1", "shared", 2),
        AgentRows("c1", "agent_0", "shared", 2),
    ]
    layout = build_team_layout(rows)
    assert layout.n_rows == 5
    np.testing.assert_array_equal(layout.team_row_of["shared"], [0, 1, 2, 0, 1, 2, 3, 4, 3, 4])
    np.testing.assert_array_equal(layout.chunk_starts, [0, 3])
    np.testing.assert_array_equal(layout.bootstrap_rows, [2, 4])
    np.testing.assert_array_equal(layout.last_real_rows, [1, 3])
    np.testing.assert_array_equal(layout.valid_mask(), [True, True, False, True, False])
    assert layout.chunk_agents == [["agent_0", "agent_1"], ["agent_0", "agent_1"]]


def test_gather_sum_and_scatter_with_individual_modules():
    rows = [
        AgentRows("c0", "a", "a", 2),
        AgentRows("c0", "b", "b", 2),
        AgentRows("c1", "a", "a", 3),
        AgentRows("c1", "b", "b", 3),
    ]
    layout = build_team_layout(rows)
    rewards = {"a": np.array([1.0, 2.0, 3.0, 4.0, 5.0]), "b": np.array([10.0, 20, 30, 40, 50])}
    team = layout.gather_sum(rewards)
    np.testing.assert_allclose(team, [11, 22, 33, 44, 55])
    np.testing.assert_allclose(layout.scatter(team, "b"), team)


def test_agents_with_different_lengths_are_rejected():
    rows = [AgentRows("c0", "a", "p", 3), AgentRows("c0", "b", "p", 2)]
    with pytest.raises(MisalignedAgentsError, match="different step counts"):
        build_team_layout(rows)
