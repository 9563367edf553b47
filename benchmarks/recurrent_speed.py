"""Env steps per second of recurrent `mappo` against feed-forward `mappo` on SMAX,
measured in one invocation, alternating the two so that drifts of the machine hit
both alike:

    python benchmarks/recurrent_speed.py --scenario 3m --steps 50000 --repeats 2

Rows: feed-forward `mappo` (the `smax` source), `mappo` with a GRU actor
(`use_rnn: true`, 64 units, sequences of 10), and with an LSTM actor; each the
median over ``--repeats`` runs of its wall time. Every run is built, trained and
stopped in this process on one torch thread.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings

import common
import ray
import torch

from marllib_ext import algos, make_env

VARIANTS = {
    "feed-forward": {},
    "GRU": {"use_rnn": True, "rnn_type": "gru"},
    "LSTM": {"use_rnn": True, "rnn_type": "lstm"},
}


def run(env_name: str, steps: int, settings: dict) -> float:
    """Wall seconds of one `mappo` run to ``steps`` env steps."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        algos.get("mappo", "smax", **settings).fit(
            make_env(env_name), stop={"timesteps_total": steps}, local_dir=out, seed=0
        )
        return time.perf_counter() - start


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--scenario", default="3m")
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    common.start_ray(num_cpus=2)
    env = f"smax:{args.scenario}"
    walls: dict[str, list[float]] = {name: [] for name in VARIANTS}
    try:
        for _ in range(args.repeats):
            for name, settings in VARIANTS.items():
                wall = run(env, args.steps, settings)
                walls[name].append(wall)
                print(f"{name}: {wall:.1f} s", flush=True)
    finally:
        ray.shutdown()
    base = statistics.median(walls["feed-forward"])
    print(f"\n{env}, {args.steps} env steps per run, median of {args.repeats} runs")
    print("| actor | wall s | env steps/s | env steps/s / feed-forward |")
    print("|---|---|---|---|")
    for name in VARIANTS:
        wall = statistics.median(walls[name])
        print(f"| {name} | {wall:.0f} | {args.steps / wall:.0f} | {base / wall:.2f} |")


if __name__ == "__main__":
    main()
