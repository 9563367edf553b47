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


def test_absent_agents_leave_their_env_steps_empty():
    # A chunk of 5 env steps: "a" acts on all; "b" dies after acting at steps 0 and 1;
    # "c" arrives at step 2 and acts on 2, 3, 4. Team rows: 5 steps + 1 bootstrap.
    rows = [
        AgentRows("c0", "a", "p", 6, np.arange(5)),
        AgentRows("c0", "b", "p", 3, np.array([0, 1]), observed_at_end=False),
        AgentRows("c0", "c", "p", 4, np.array([2, 3, 4])),
    ]
    layout = build_team_layout(rows, {"c0": 5})
    assert layout.n_rows == 6
    # Module rows in batch order: a's 6, b's 3, c's 4; every bootstrap row -> team row 5.
    np.testing.assert_array_equal(layout.team_row_of["p"], [0, 1, 2, 3, 4, 5, 0, 1, 5, 2, 3, 4, 5])
    expected_present = [
        [1, 1, 0],
        [1, 1, 0],
        [1, 0, 1],
        [1, 0, 1],
        [1, 0, 1],
        [1, 0, 1],  # bootstrap row: b is dead, a and c observe the final state
    ]
    np.testing.assert_array_equal(layout.present, np.array(expected_present, dtype=bool))
    rewards = {"p": np.array([1, 1, 1, 1, 1, 0, 10, 10, 0, 100, 100, 100, 0], float)}
    np.testing.assert_allclose(layout.gather_sum(rewards), [11, 11, 101, 101, 101, 0])
    np.testing.assert_array_equal(layout.chunk_of_rows(), [0] * 6)


def test_offsets_outside_the_chunk_are_rejected():
    rows = [AgentRows("c0", "a", "p", 3, np.array([0, 4]))]
    with pytest.raises(MisalignedAgentsError, match="do not fit 3 steps"):
        build_team_layout(rows, {"c0": 3})
