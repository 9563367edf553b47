"""Sampling overlapped with learning, for replay learners with remote env runners.

A synchronous ``training_step`` samples, then updates: the env runners wait while the
learner trains and the learner waits while they sample. ``OverlappedSampler`` keeps
one sample request in flight on every remote runner: ``collect()`` waits for the
requests issued at the previous call, issues the next ones at once and returns what
came back, so the runners sample while the caller's updates run.

The price is one iteration of policy lag: weights synced after this iteration's
updates reach a runner after the request already in flight (an actor runs its calls
in the order they were sent), so the sample collected next was taken with the weights
of the iteration before. Replay learners train on older episodes than that anyway.
Episodes in flight when the algorithm is checkpointed are not in the checkpoint.

RLlib's end-of-iteration sync of the runners' states (a blocking call on every runner,
which would wait for the sample in flight) is switched off for such an algorithm
(``rllib_compat.skip_end_of_iteration_runner_sync``). What it carried that a team
runner reads, the lifetime env-step count its exploration schedule reads, goes with
each request instead; team runners' connectors hold no state to merge.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

SAMPLE_TAG = "overlapped_sample"


def _sample_with_metrics(
    env_runner, env_steps_lifetime: int, random_actions: bool
) -> tuple[list, dict, bool]:
    env_runner.set_state({NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps_lifetime})
    sampled = env_runner.sample(random_actions=random_actions)
    return sampled, env_runner.get_metrics(), random_actions


class OverlappedSampler:
    """One in-flight ``sample()`` per remote env runner of ``env_runner_group``; the
    runners return ``TeamEpisode`` s (``rollout.team_episodes``).
    ``acts_randomly_at(env_steps)``: whether a request issued after ``env_steps``
    lifetime env steps acts uniformly at random (the warm-up)."""

    def __init__(
        self,
        env_runner_group,
        sample_timeout_s: float | None,
        acts_randomly_at: Callable[[int], bool] = lambda env_steps: False,
    ) -> None:
        # TeamReplaySettings refuses overlap_sampling without remote runners.
        self.group = env_runner_group
        self.sample_timeout_s = sample_timeout_s
        self.acts_randomly_at = acts_randomly_at

    def in_flight(self) -> int:
        return self.group.num_in_flight_async_reqs(SAMPLE_TAG)

    def request(self, env_steps_lifetime: int, runner_ids: list[int] | None = None) -> int:
        """Issues a sample request on ``runner_ids`` (default: every healthy runner), each
        runner's exploration starting from ``env_steps_lifetime``."""
        return self.group.foreach_env_runner_async(
            partial(
                _sample_with_metrics,
                env_steps_lifetime=int(env_steps_lifetime),
                random_actions=self.acts_randomly_at(int(env_steps_lifetime)),
            ),
            tag=SAMPLE_TAG,
            remote_worker_ids=runner_ids,
        )

    def collect(self, env_steps_lifetime: int) -> tuple[list, list[dict[str, Any]], bool]:
        """``(episodes, runner_metrics, random_actions)`` of the requests in flight
        (issued now if none is), after the next requests are issued;
        ``random_actions``: whether any of them acted at random.
        ``env_steps_lifetime``: the env steps sampled before these requests' episodes.
        Empty when no runner is healthy or none answered within ``sample_timeout_s``
        (RLlib restores crashed runners between iterations)."""
        if not self.in_flight():
            self.request(env_steps_lifetime)
        results = self.group.fetch_ready_async_reqs(
            tags=SAMPLE_TAG, timeout_seconds=self.sample_timeout_s
        )
        episodes, metrics, random_actions = [], [], False
        for _, (sampled, runner_metrics, acted_randomly) in results:
            episodes.extend(sampled)
            metrics.append(runner_metrics)
            random_actions |= acted_randomly
        env_steps_lifetime += sum(episode.length for episode in episodes)
        # A runner that answered is free; one that did not keeps its request in flight.
        if not self.in_flight():
            self.request(env_steps_lifetime)
        elif results:
            self.request(env_steps_lifetime, [runner for runner, _ in results])
        return episodes, metrics, random_actions
