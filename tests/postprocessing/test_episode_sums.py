"""Episode sums over chunks, including chunks that RLlib's learner connector extended."""

from types import SimpleNamespace

import pytest

from marllib_ext.postprocessing.episode_sums import sum_over_env_steps


def chunk(start, values):
    return SimpleNamespace(env_t_started=start, values=values)


def test_plain_chunks_sum_every_step_once():
    chunks = [chunk(0, [1.0, 2.0]), chunk(2, [3.0]), chunk(3, [4.0, 5.0])]
    assert sum_over_env_steps(chunks, lambda c: c.values) == 15.0


def test_artificial_step_appended_to_an_earlier_chunk_is_not_counted():
    # Chunk 0 covered steps 0..3; a local learner appended a copy of its last value
    # (step "4"), which is really chunk 1's first step.
    extended = chunk(0, [1.0, 2.0, 3.0, 4.0, 4.0])
    chunks = [extended, chunk(4, [5.0, 6.0, 7.0])]
    assert sum_over_env_steps(chunks, lambda c: c.values) == pytest.approx(28.0)


def test_empty_chunks():
    assert sum_over_env_steps([], lambda c: c.values) == 0.0
    assert sum_over_env_steps([chunk(0, [])], lambda c: c.values) == 0.0
