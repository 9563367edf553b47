"""Cost of EFXplorer on top of MAPPO, measured in one run.

Prints:
  * seconds per training iteration of `efx_mappo` and `mappo` on mpe:simple_spread
    (N=3, 25 cycles, same YAML settings), interleaved iteration by iteration, and the
    ratio efx_mappo / mappo (target <= 1.10);
  * wall time of `ops.conservative_advantage` (seed_dp) for T=10^6 steps and 8 agents,
    with episodes of 25 steps, next to one `np.minimum.accumulate` pass over the same
    array, of the hinge form on the T=10^6 team column and of the default demand_push
    form (hinge plus the per-agent push on 8 agents).

    python benchmarks/efx_overhead.py --timing-iters 8
"""

from __future__ import annotations

import time

import common
import numpy as np
import ray
from common import interleaved_seconds_per_iteration

from marllib_ext import algos, make_env
from marllib_ext.ops.advantages import standardize_valid
from marllib_ext.ops.efx import (
    conservative_advantage,
    demand_push_advantage,
    segment_slack,
    slack_cap_advantage,
)


def iteration_times(timing_iters: int, seed: int) -> dict[str, float]:
    env = make_env("mpe:simple_spread", N=3, max_cycles=25)
    return interleaved_seconds_per_iteration(
        {
            "mappo": lambda: algos.mappo().rllib_config(env, seed=seed).build_algo(),
            "efx_mappo": lambda: algos.efx_mappo().rllib_config(env, seed=seed).build_algo(),
        },
        timing_iters,
    )


def conservative_advantage_time(horizon: int, n_agents: int, repeats: int = 5) -> dict:
    rng = np.random.default_rng(0)
    a_ext = rng.normal(size=(horizon, n_agents))
    delta = rng.normal(size=horizon)
    z = rng.normal(size=horizon)
    ends = np.zeros(horizon, bool)
    ends[24::25] = True
    best = min(_timed(conservative_advantage, a_ext, delta, z, ends) for _ in range(repeats))
    plain = min(_timed(np.minimum.accumulate, a_ext, 0) for _ in range(repeats))

    def hinge():  # standardize, slack per segment, capped minimum
        a_hat = standardize_valid(a_ext[:, 0], np.ones(horizon, bool))
        slack = segment_slack(delta, z, ends)
        return slack_cap_advantage(a_hat, slack, kappa=1.0, z_range=10.0, only_unmet=True)[0], slack

    logp, entropy = -np.abs(a_ext), np.abs(a_ext)

    def demand_push():  # the default form: hinge, then the per-agent push
        capped, slack = hinge()
        demand_push_advantage(capped, slack, logp, entropy, kappa=1.0, z_range=10.0)

    return {
        "seconds": best,
        "one_minimum_accumulate_seconds": plain,
        "hinge_one_agent_column_seconds": min(_timed(hinge) for _ in range(repeats)),
        "demand_push_seconds": min(_timed(demand_push) for _ in range(repeats)),
    }


def _timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--timing-iters", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    report: dict[str, object] = {
        "conservative_advantage_T1e6_8agents": conservative_advantage_time(10**6, 8)
    }
    ca = report["conservative_advantage_T1e6_8agents"]
    print(
        f"conservative_advantage T=1e6, 8 agents: {ca['seconds'] * 1e3:.1f} ms "
        f"(one np.minimum.accumulate over the array: "
        f"{ca['one_minimum_accumulate_seconds'] * 1e3:.1f} ms); hinge form on the team "
        f"column: {ca['hinge_one_agent_column_seconds'] * 1e3:.1f} ms; demand_push (hinge "
        f"+ push on 8 agents): {ca['demand_push_seconds'] * 1e3:.1f} ms"
    )
    # Logical CPUs: both algorithms hold an env-runner actor; only one runs at a time.
    common.start_ray(num_cpus=4)
    seconds = iteration_times(args.timing_iters, args.seed)
    ray.shutdown()
    report["seconds_per_iteration"] = seconds
    report["efx_over_mappo"] = seconds["efx_mappo"] / seconds["mappo"]
    for name, value in seconds.items():
        print(f"{name:<10} {value:.2f} s/iteration (median of {args.timing_iters})")
    print(f"efx_mappo / mappo iteration time: {report['efx_over_mappo']:.3f} (target <= 1.10)")
    common.print_report(report)


if __name__ == "__main__":
    main()
