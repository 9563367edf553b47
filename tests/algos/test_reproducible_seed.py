"""A run reproduces from its seed across processes: two fresh interpreters with
different hash seeds train the same first iteration (RLlib iterated an episode's agents
in the per-process hash order of a set before the package sorted them)."""

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
algo = algos.get("mappo", **settings).rllib_config(env, seed=101).build_algo()
result = algo.train()
params = local_learner(algo).module["shared"].parameters()
print("RESULT", result["env_runners"].get("episode_return_mean"), sum(float(p.sum()) for p in params))
algo.stop()
"""


def one_iteration(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", ONE_ITERATION], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return lines[0]


def test_the_same_seed_trains_the_same_iteration_in_two_processes():
    assert one_iteration("1") == one_iteration("2")
