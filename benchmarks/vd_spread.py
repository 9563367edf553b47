"""Value decomposition on mpe:simple_spread (N=3, 25 cycles), measured in one run.

Prints:
  * seconds per training iteration of `vdppo` (QMIX) and `mappo`, interleaved, and the
    ratio vdppo / mappo;
  * per-agent mean return of `mappo`, `vdppo` (qmix), `vdppo` (vdn) and `efx_vdppo`
    after --steps env steps each (same seed), next to a uniformly random team.

    python benchmarks/vd_spread.py --steps 100000 --timing-iters 6
"""

from __future__ import annotations

import argparse
import json

import ray
from mappo_spread import baseline_return
from timing import interleaved_seconds_per_iteration

from marllib_ext import algos, make_env

RUNS = {
    "mappo": ("mappo", {}),
    "vdppo_qmix": ("vdppo", {"mixer": "qmix"}),
    "vdppo_vdn": ("vdppo", {"mixer": "vdn"}),
    "efx_vdppo": ("efx_vdppo", {}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--timing-iters", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    env = make_env("mpe:simple_spread", N=3, max_cycles=25)

    # Logical CPUs: both timed algorithms hold an env-runner actor; one runs at a time.
    ray.init(num_cpus=4, include_dashboard=False, configure_logging=False, log_to_driver=False)
    report: dict[str, object] = {"random_agent_return": baseline_return("random", 200, args.seed)}
    seconds = interleaved_seconds_per_iteration(
        {
            "mappo": lambda: algos.mappo().rllib_config(env, seed=args.seed).build_algo(),
            "vdppo_qmix": lambda: algos.vdppo().rllib_config(env, seed=args.seed).build_algo(),
        },
        args.timing_iters,
    )
    report["seconds_per_iteration"] = seconds
    report["vdppo_over_mappo"] = seconds["vdppo_qmix"] / seconds["mappo"]
    print(f"vdppo (qmix) / mappo iteration time: {report['vdppo_over_mappo']:.3f} {seconds}")

    finals = {}
    for label, (name, overrides) in RUNS.items():
        result = algos.get(name, **overrides).fit(
            env,
            stop={"timesteps_total": args.steps},
            seed=args.seed,
            local_dir="runs/vd_spread",
            checkpoint_end=False,
        )
        finals[label] = result.final["agent_return_mean"]
        print(
            f"{label:<11} {result.final['timesteps_total']} env steps: per-agent return "
            f"{finals[label]:.2f}",
            flush=True,
        )
    ray.shutdown()
    report["final_agent_return"] = finals
    print(f"random      per-agent return {report['random_agent_return']:.2f}")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
