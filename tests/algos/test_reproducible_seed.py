"""A run reproduces from its seed across processes: two fresh interpreters with
different hash seeds train two iterations and end with bit-identical weights.

Default tier: `mappo` on `mpe:simple_spread` (a shared policy and a policy per agent) and
on `vmas:navigation` (the batched rollout path). Slow tier: one algorithm of every other
pipeline (independent, value decomposition, EFX, off-policy) on both env families.
Where their optional installs are present: `mappo` and `qmix` on `smax:3m`, `mappo` on
GRF.
Before, RLlib iterated an episode's agents in the per-process hash order of a set, and
the modules were built in the hash order of the policy-id set, so the seeded initial
weights went to different agents."""

import contextlib
import os
import subprocess
import sys
import tempfile

import pytest

TWO_ITERATIONS = """
import hashlib, sys, warnings
warnings.filterwarnings("ignore")
import ray
ray.init(num_cpus=1, include_dashboard=False, configure_logging=False, log_to_driver=False)
from marllib_ext import algos, make_env
from marllib_ext.rllib_compat import local_learner
ON_POLICY = dict(train_batch_size=200, minibatch_size=100, num_epochs=1)
OFF_POLICY = dict(learning_starts=2, batch_episode=4)
for case in sys.argv[1:]:
    name, env_name, share_policy = case.split(",")
    family = env_name.split(":")[0]
    short = {"mpe": {"max_cycles": 10}, "vmas": {"max_steps": 10}, "smax": {"max_steps": 10}}
    env = make_env(env_name, **short.get(family, {}))
    settings = OFF_POLICY if name in ("qmix", "maddpg") else ON_POLICY
    source = {"hyperparam_source": family} if family in ("vmas", "smax") else {}
    config = algos.get(name, num_env_runners=0, **source, **settings).rllib_config(
        env, share_policy=share_policy, seed=101, num_envs_per_env_runner=4
    )
    algo = config.build_algo()
    for _ in range(2):
        algo.train()
    learner = local_learner(algo)
    digest = hashlib.sha256()
    for module_id in sorted(learner.module.keys()):
        for parameter in learner.module[module_id].parameters():
            digest.update(parameter.detach().cpu().numpy().tobytes())
    print("RESULT", case, digest.hexdigest())
    algo.stop()
"""

DEFAULT_CASES = [
    "mappo,mpe:simple_spread,all",
    "mappo,mpe:simple_spread,individual",
    "mappo,vmas:navigation,all",
]
SLOW_CASES = [
    f"{name},{env},all"
    for name in ("ippo", "vdppo", "efx_mappo")
    for env in ("mpe:simple_spread", "vmas:navigation")
] + ["qmix,mpe:simple_spread,all", "maddpg,vmas:navigation,all", "happo,vmas:navigation,individual"]


def two_iterations(hash_seeds: tuple[str, str], cases: list[str]) -> list[list[str]]:
    """One process per hash seed, side by side (one Ray CPU each; output to files, so
    neither blocks on a full pipe), then each one's ``RESULT`` lines."""
    with contextlib.ExitStack() as stack:
        runs = []
        for hash_seed in hash_seeds:
            env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "1"}
            out = stack.enter_context(tempfile.TemporaryFile("w+"))
            err = stack.enter_context(tempfile.TemporaryFile("w+"))
            command = [sys.executable, "-c", TWO_ITERATIONS, *cases]
            process = subprocess.Popen(command, env=env, stdout=out, stderr=err)
            stack.callback(lambda p=process: p.poll() is None and p.kill())
            runs.append((process, out, err))
        results = []
        for process, out, err in runs:
            process.wait(timeout=1200)
            out.seek(0)
            err.seek(0)
            lines = [line for line in out.read().splitlines() if line.startswith("RESULT")]
            assert process.returncode == 0 and len(lines) == len(cases), err.read()[-3000:]
            results.append(lines)
        return results


def test_the_same_seed_trains_the_same_weights_in_two_processes():
    pytest.importorskip("vmas", reason="the vmas extra is not installed")
    first, second = two_iterations(("1", "2"), DEFAULT_CASES)
    assert first == second


@pytest.mark.slow
def test_every_pipeline_reproduces_on_mpe_and_vmas():
    pytest.importorskip("vmas", reason="the vmas extra is not installed")
    first, second = two_iterations(("1", "2"), SLOW_CASES)
    assert first == second


@pytest.mark.parametrize(
    ("module", "cases"),
    [
        ("jaxmarl", ["mappo,smax:3m,all", "qmix,smax:3m,all"]),
        ("gfootball", ["mappo,grf:academy_3_vs_1_with_keeper,all"]),
    ],
)
def test_smax_and_grf_reproduce(module, cases):
    """Where their optional installs are present (SMAX's batched rollout, GRF's engine
    seeded per episode from the env's generator)."""
    pytest.importorskip(module, reason=f"{module} is not installed")
    first, second = two_iterations(("1", "2"), cases)
    assert first == second
