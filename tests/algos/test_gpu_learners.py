"""GPU learners: one iteration of each family with ``num_gpus_per_learner=1``; every
column our connectors write and every module parameter lives on the GPU."""

import pytest
import torch

from marllib_ext import algos
from marllib_ext.rllib_compat import local_learner
from tests.helpers import CapturesTrainBatch

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA (no GPU on this machine)"
)
FAMILIES = {
    "mappo": "toy:coordination",
    "vdppo": "toy:coordination",
    "efx_mappo": "toy:coordination",
    "happo": "toy:coordination",
    "coma": "toy:coordination",
    "mappo_lag": "mpe:simple_spread",
}


@pytest.fixture(scope="module")
def gpu_ray():
    import ray

    ray.init(
        address="local", num_cpus=2, num_gpus=1, include_dashboard=False,
        configure_logging=False, log_to_driver=False,
    )  # fmt: skip
    yield
    ray.shutdown()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_learner_batches_and_modules_are_on_the_gpu(gpu_ray, name):
    whole_batch = name == "coma"
    config = algos.get(
        name,
        hyperparam_source="toy",
        num_env_runners=0,
        num_gpus_per_learner=1,
        train_batch_size=200,
        minibatch_size=None if whole_batch else 100,
    ).rllib_config(FAMILIES[name], share_policy="individual" if name == "happo" else "all", seed=0)
    capturing = type("CapturingLearner", (CapturesTrainBatch, config.learner_class), {})
    algorithm = config.learners(learner_class=capturing).build_algo()
    try:
        algorithm.train()
        learner = local_learner(algorithm)
        for module_id, rows in learner.last_train_batch.policy_batches.items():
            for column, value in rows.items():
                if isinstance(value, torch.Tensor):
                    assert value.is_cuda, (module_id, column)
        for module_id in list(learner.module.keys()):
            assert all(p.is_cuda for p in learner.module[module_id].parameters()), module_id
    finally:
        algorithm.stop()


# Off-policy families: their own replay stores hand numpy rows to a GPU learner.
OFF_POLICY = {
    "qmix": ("mpe:simple_spread", {"batch_episode": 4, "learning_starts": 2}),
    "iql": ("mpe:simple_spread", {"batch_episode": 4, "learning_starts": 2}),
    "maddpg": ("mpe:simple_spread", {"batch_episode": 4, "learning_starts": 2}),
    "isac_roer": ("mpe:simple_spread", {"per_type": "JS"}),
    "sac_roer": ("Pendulum-v1", {"per_type": "JS"}),
}
CONTINUOUS = {"maddpg", "isac_roer"}


@pytest.mark.parametrize("name", sorted(OFF_POLICY))
def test_off_policy_learners_update_on_the_gpu(gpu_ray, name):
    """Iterations past the start of learning move every trained module (target copies
    follow on their own schedule), and every module parameter stays on the GPU."""
    from marllib_ext import make_env

    env_name, overrides = OFF_POLICY[name]
    if env_name.startswith("mpe:"):
        env = make_env(env_name, max_cycles=10, continuous_actions=name in CONTINUOUS)
    else:
        env = env_name
    if name.endswith("roer"):
        overrides = {
            **overrides, "hiddens": [32], "train_batch_size": 32,
            "num_steps_sampled_before_learning_starts": 64, "rollout_fragment_length": 8,
        }  # fmt: skip
    config = algos.get(name, num_env_runners=0, num_gpus_per_learner=1, **overrides).rllib_config(
        env, seed=0
    )
    algorithm = config.build_algo()
    try:
        learner = local_learner(algorithm)
        before = {
            module_id: [p.detach().clone() for p in learner.module[module_id].parameters()]
            for module_id in list(learner.module.keys())
        }
        for _ in range(12):
            algorithm.train()
        for module_id, initial in before.items():
            now = list(learner.module[module_id].parameters())
            assert all(p.is_cuda for p in now), module_id
            if now and not module_id.startswith("target_"):
                assert any(not torch.equal(a, b) for a, b in zip(initial, now, strict=True)), (
                    module_id
                )
    finally:
        algorithm.stop()
