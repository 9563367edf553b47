"""Interleaved iteration timing shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def interleaved_seconds_per_iteration(
    builders: dict[str, Callable[[], Any]], timing_iters: int
) -> dict[str, float]:
    """Median seconds of ``Algorithm.train()`` per variant, trained in turns.

    Every variant takes one iteration before the next one does, so all see the same
    machine state; the first (warm-up) iteration of each is dropped.
    """
    algorithms = {name: build() for name, build in builders.items()}
    times: dict[str, list[float]] = {name: [] for name in algorithms}
    try:
        for iteration in range(timing_iters + 1):
            for name, algorithm in algorithms.items():
                start = time.perf_counter()
                algorithm.train()
                if iteration > 0:
                    times[name].append(time.perf_counter() - start)
    finally:
        for algorithm in algorithms.values():
            algorithm.stop()
    return {name: statistics.median(values) for name, values in times.items()}
