"""`mappo` and `ippo` on Google Research Football: train at an equal env-step budget
over seeds, then evaluate the scoring rate of the final checkpoint, next to a team of
uniformly random actions.

    python benchmarks/grf_learning.py --scenario academy_3_vs_1_with_keeper \\
        --labels mappo ippo --seeds 0 1 2 --steps 150000 --episodes 100

Each (label, seed) writes ``<out>/<scenario>/<label>/seed<k>.json`` (resumable): the env
steps, wall time, the last training iteration's episode return and the evaluated
scoring rate (``evaluate``: sampled actions; ``success``: the left team scored more
than it conceded). Needs gfootball (docs/envs.md).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from success_runs import print_table, run_seeds

from marllib_ext.envs.grf import grf_env


def random_scoring_rate(scenario: str, episodes: int, seed: int = 0) -> tuple[float, float]:
    """``(scoring rate, env steps/s)`` of uniformly random actions over ``episodes``."""
    env = grf_env(scenario)
    rng = np.random.default_rng(seed)
    scored = steps = 0
    start = time.perf_counter()
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        while env.agents:
            actions = {a: int(rng.integers(env.action_space(a).n)) for a in env.agents}
            *_, infos = env.step(actions)
            steps += 1
        scored += bool(next(iter(infos.values()))["success"])
    rate = steps / (time.perf_counter() - start)
    env.close()
    return scored / episodes, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="academy_3_vs_1_with_keeper")
    parser.add_argument("--labels", nargs="+", default=["mappo", "ippo"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=150_000)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/grf"))
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--random-only", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    baseline = args.out / args.scenario / "random.json"
    if not baseline.exists():
        rate, speed = random_scoring_rate(args.scenario, args.episodes)
        baseline.parent.mkdir(parents=True, exist_ok=True)
        baseline.write_text(json.dumps({"scoring_rate": rate, "env_steps_per_s": speed}))
    print(f"grf:{args.scenario} random: {baseline.read_text()}", flush=True)
    if args.random_only:
        return
    rows = run_seeds(
        f"grf:{args.scenario}", args.labels, args.seeds, args.steps, args.episodes, args.out,
        args.num_cpus,
    )  # fmt: skip
    print_table(rows, rate="scoring rate")


if __name__ == "__main__":
    main()
