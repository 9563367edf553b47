"""A run reproduces from its seed across processes: two fresh interpreters with
different hash seeds train the same first iteration, with one shared policy and with a
policy per agent. Before, RLlib iterated an episode's agents in the per-process hash
order of a set, and the modules were built in the hash order of the policy-id set, so
the seeded initial weights went to different agents."""

import os
import subprocess
import sys

ONE_ITERATION = """
import ray, torch
ray.init(num_cpus=1, include_dashboard=False, configure_logging=False, log_to_driver=False)
from marllib_ext import algos, make_env
from marllib_ext.rllib_compat import local_learner
env = make_env("mpe:simple_spread", max_cycles=10)
settings = dict(num_env_runners=0, train_batch_size=200, minibatch_size=100, num_epochs=1)
for share_policy in ("all", "individual"):
    config = algos.get("mappo", **settings).rllib_config(env, share_policy=share_policy, seed=101)
    algo = config.build_algo()
    algo.train()
    learner = local_learner(algo)
    modules = sorted(learner.module.keys())
    sums = {m: float(sum(p.sum() for p in learner.module[m].parameters())) for m in modules}
    print("RESULT", share_policy, sums)
    algo.stop()
"""


def one_iteration(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", ONE_ITERATION], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert done.returncode == 0 and len(lines) == 2, done.stderr[-3000:]
    return "\n".join(lines)


def test_the_same_seed_trains_the_same_iteration_in_two_processes():
    assert one_iteration("1") == one_iteration("2")
