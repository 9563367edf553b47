"""The learner's batch from episode chunks against the same batch from a rollout block,
in one run: seconds to build one iteration's batch each way, on one seeded sample.

A batched runner samples one block of ``--num-envs`` worlds x ``--steps`` steps; the
learner builds its batch from the block (``block_batch``) and from the same steps as
episode chunks as its ``update`` does (``episode_batch``: the advantage connectors on
the chunks read as blocks; code without it: RLlib's learner connectors), each
``--repeats`` times, each on a fresh copy of the chunks (RLlib's connectors change
them in place; the copying is not timed); the medians are printed with their ratio.

    python benchmarks/chunk_batch.py --env vmas:navigation --num-envs 64 --steps 100
"""

from __future__ import annotations

import copy
import statistics
import time
import warnings

import common
import ray
from ray.rllib.core.learner.training_data import TrainingData

from marllib_ext import algos, make_env
from marllib_ext.rllib_compat import reset_before_next_sample


def sample(name: str, env_name: str, num_envs: int, steps: int):
    """``(algorithm, block, chunks)`` of one sample of ``steps`` steps in every world."""
    source = env_name.split(":")[0]
    settings = {"train_batch_size": num_envs * steps}
    if name in ("coma",):
        settings["minibatch_size"] = None
    length = {"max_cycles": 25} if source == "mpe" else {}
    share = "individual" if name in ("happo", "hatrpo") else "all"
    algorithm = (
        algos.get(name, hyperparam_source=source, **settings)
        .rllib_config(
            make_env(env_name, **length),
            share_policy=share,
            seed=0,
            num_env_runners=0,
            num_envs_per_env_runner=num_envs,
        )
        .build_algo()
    )
    runner = algorithm.env_runner
    rollout = runner.array_rollout
    reset_before_next_sample(runner)
    runner.sample(num_timesteps=num_envs * 3)
    block = rollout._run(steps, True, False)
    return algorithm, rollout._block(block), rollout._episodes(block)


def timed(algorithm, block, chunks, repeats: int) -> tuple[float, float]:
    def run(learner):
        from_block, from_chunks = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            learner.block_batch([block])
            from_block.append(time.perf_counter() - start)
            episodes = copy.deepcopy(chunks)
            start = time.perf_counter()
            learner.train_batch(TrainingData(episodes=episodes))
            from_chunks.append(time.perf_counter() - start)
        return statistics.median(from_block), statistics.median(from_chunks)

    return next(iter(algorithm.learner_group.foreach_learner(run))).get()


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--env", default="vmas:navigation")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--algos", nargs="*", default=["mappo", "vdppo", "happo", "efx_mappo", "mappo_lag"]
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    common.start_ray(num_cpus=2)
    print(f"{args.env}: {args.num_envs} worlds x {args.steps} steps per batch")
    print(f"{'algorithm':<12} {'block s':>9} {'chunks s':>9} {'chunks / block':>15}")
    for name in args.algos:
        algorithm, block, chunks = sample(name, args.env, args.num_envs, args.steps)
        try:
            from_block, from_chunks = timed(algorithm, block, chunks, args.repeats)
        finally:
            algorithm.stop()
        print(f"{name:<12} {from_block:9.3f} {from_chunks:9.3f} {from_chunks / from_block:15.2f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
