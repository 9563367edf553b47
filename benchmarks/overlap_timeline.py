"""Where an ``overlap_sampling`` run's time goes: the remote env runner's sampling and
idle time against the driver's updates and its waits for the runner, in one run:

    python benchmarks/overlap_timeline.py --scenario 3m --steps 20000

With ``overlap_sampling`` (``rollout.overlapped``) the runner samples the next episodes
while the driver updates. Such a run is bound by whichever side takes longer per
iteration: when the driver waits in ``collect()``, sampling is the bound; when the
runner idles between requests, the learner is. Both are timed on one clock
(``time.monotonic``, one clock for every process of a Linux machine): the runner's
``sample()`` calls from inside the runner, the driver's ``collect()`` and learner
updates from the driver. The first ``collect()`` is reported apart: it waits for the
runner's first sample, which compiles SMAX's step in that process.
"""

from __future__ import annotations

import statistics
import time
import warnings

import common
import ray
import torch
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from marllib_ext import algos, make_env
from marllib_ext.rollout import overlapped


def timed_sample(env_runner, env_steps_lifetime: int) -> tuple[list, dict]:
    """``overlapped._sample_with_metrics``, with the runner's start and end of its
    ``sample()`` in the metrics it returns (pickled by value: it runs in the runner)."""
    env_runner.set_state({NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps_lifetime})
    start = time.monotonic()
    episodes = env_runner.sample()
    end = time.monotonic()
    metrics = env_runner.get_metrics()
    metrics["_overlap_timeline"] = (start, end, sum(episode.length for episode in episodes))
    return episodes, metrics


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--algo", default="qmix")
    parser.add_argument("--source", default="pymarl2")
    parser.add_argument("--scenario", default="3m")
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    overlapped._sample_with_metrics = timed_sample
    samples: list[tuple[float, float, int]] = []
    collects: list[float] = []
    updates: list[float] = []

    update = LearnerGroup.update

    def timed_update(self, *a, **k):
        start = time.monotonic()
        try:
            return update(self, *a, **k)
        finally:
            updates.append(time.monotonic() - start)

    collect = overlapped.OverlappedSampler.collect

    def timed_collect(self, env_steps_lifetime):
        start = time.monotonic()
        episodes, metrics = collect(self, env_steps_lifetime)
        collects.append(time.monotonic() - start)
        samples.extend(m.pop("_overlap_timeline") for m in metrics)
        return episodes, metrics

    LearnerGroup.update = timed_update
    overlapped.OverlappedSampler.collect = timed_collect
    common.start_ray(num_cpus=2)
    try:
        config = algos.get(
            args.algo, args.source, num_env_runners=1, overlap_sampling=True
        ).rllib_config(make_env(f"smax:{args.scenario}"), seed=0)
        algorithm = config.build_algo()
        start, sampled, iterations = time.monotonic(), 0, 0
        while sampled < args.steps:
            result = algorithm.train()
            sampled = result["env_runners"][NUM_ENV_STEPS_SAMPLED_LIFETIME]
            iterations += 1
        wall = time.monotonic() - start
        algorithm.stop()
    finally:
        ray.shutdown()

    sampling = [end - begin for begin, end, _ in samples]
    idle = [samples[i + 1][0] - samples[i][1] for i in range(len(samples) - 1)]
    steady = collects[1:]
    print(
        f"`{args.algo}` ({args.source}) on smax:{args.scenario}, overlap_sampling, one "
        f"remote runner: {int(sampled)} env steps, {iterations} iterations, {wall:.1f} s"
    )
    print("| part | total s | per call, median ms | calls |")
    print("|---|---|---|---|")
    rows = [
        ("driver: first collect() (the runner's first sample, with compilation)",
         collects[:1]),
        ("driver: later collect() calls (waits for the runner)", steady),
        ("driver: learner updates", updates),
        ("runner: sample() (after the first)", sampling[1:]),
        ("runner: idle between requests", idle),
    ]  # fmt: skip
    for label, values in rows:
        median = statistics.median(values) * 1e3 if values else float("nan")
        print(f"| {label} | {sum(values):.1f} | {median:.0f} | {len(values)} |")
    busy = sum(sampling[1:]) / max(1e-9, sum(sampling[1:]) + sum(idle))
    print(
        f"\nThe runner sampled {busy:.0%} of the time after its first sample; the driver "
        f"waited {sum(steady):.1f} s on it and updated for {sum(updates):.1f} s."
    )


if __name__ == "__main__":
    main()
