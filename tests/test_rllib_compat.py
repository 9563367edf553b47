"""Each RLlib behaviour that ``marllib_ext.rllib_compat`` relies on, checked on real
RLlib objects: these tests fail when an RLlib upgrade changes one of them."""

import dataclasses
import inspect
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.dqn import dqn
from ray.rllib.algorithms.sac import SAC
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.core.learner import learner as learner_module
from ray.rllib.core.learner.learner import Learner
from ray.rllib.policy.sample_batch import SampleBatch
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
from ray.rllib.utils.replay_buffers.multi_agent_prioritized_episode_buffer import (
    MultiAgentPrioritizedEpisodeReplayBuffer,
)
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

from marllib_ext import algos
from marllib_ext.algos.efx.settings import EFXSettings
from marllib_ext.postprocessing.budget_connector import BudgetObservationConnector
from marllib_ext.postprocessing.efx_advantage import EFXJointAdvantageConnector
from marllib_ext.rllib_compat import (
    connectors_of,
    env_to_module,
    hand_priorities_to_replay,
    priority_trees,
    record_extra_loss,
    settings_of,
    should_save_component,
)
from tests.private_access import private_accesses

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "marllib_ext"
SMALL = {"num_env_runners": 0, "train_batch_size": 100, "minibatch_size": 50, "num_epochs": 1}


@pytest.fixture(scope="module")
def efx_algorithm(ray_session):
    config = algos.efx_mappo(hyperparam_source="toy", **SMALL).rllib_config(
        "toy:coordination", seed=0
    )
    algorithm = config.build_algo()
    yield algorithm
    algorithm.stop()


def on_learner(algorithm, fn):
    return next(iter(algorithm.learner_group.foreach_learner(fn))).get()


def test_settings_reach_learners_env_runners_and_checkpoints(efx_algorithm, tmp_path):
    settings = settings_of(efx_algorithm.config)
    assert isinstance(settings, EFXSettings)
    assert settings.z_high > settings.z_low == 0.0  # resolved from the env before travelling
    assert on_learner(efx_algorithm, lambda learner: settings_of(learner.config)) == settings
    assert settings_of(efx_algorithm.env_runner.config) == settings
    efx_algorithm.save_to_path(str(tmp_path / "ckpt"))
    restored = Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    try:
        assert settings_of(restored.config) == settings
    finally:
        restored.stop()


def test_the_learner_holds_one_advantage_connector_per_team(efx_algorithm):
    def pieces(learner):
        return len(learner.advantage_connectors(EFXJointAdvantageConnector))

    assert on_learner(efx_algorithm, pieces) == 1


def test_env_to_module_pipeline_is_reachable(efx_algorithm):
    pipeline = env_to_module(efx_algorithm.env_runner)
    assert isinstance(pipeline, ConnectorPipelineV2)
    assert len(connectors_of(pipeline, BudgetObservationConnector)) == 1


def test_learner_component_check_and_temp_losses(ray_session):
    config = algos.sac_roer(
        hiddens=[8], train_batch_size=8, num_steps_sampled_before_learning_starts=8
    ).rllib_config("Pendulum-v1", seed=0)
    learner = config.build_learner(env=gym.make("Pendulum-v1"))
    learner.build()
    assert should_save_component(learner, "optimizer", None, None)
    assert not should_save_component(learner, "optimizer", None, ["optimizer"])
    record_extra_loss(learner, "default_policy", "value_loss", torch.tensor(1.0))
    assert learner._temp_losses.pop(("default_policy", "value_loss")) == 1.0
    # SAC's gradient step pops one "<optimizer>_loss" entry per registered optimizer.
    assert '_temp_losses.pop((module_id, optim_name + "_loss"))' in inspect.getsource(
        SACTorchLearner.compute_gradients
    )


def test_td_error_item_series_is_what_the_training_step_reads():
    metrics = MetricsLogger()
    hand_priorities_to_replay(metrics, "m", torch.tensor([1.0, 2.0]))
    hand_priorities_to_replay(metrics, "m", torch.tensor([3.0]))  # replaces, not appends
    # The training step concatenates the logged items (dqn.py: np.concatenate(s)).
    items = metrics.peek(("m", TD_ERROR_KEY))
    np.testing.assert_allclose(np.concatenate([np.asarray(x) for x in items]), [3.0])
    # SAC's training step is DQN's: it hands learner_results[m][TD_ERROR_KEY] to the buffer.
    assert SAC.training_step is dqn.DQN.training_step
    assert "module_results.pop(TD_ERROR_KEY)" in inspect.getsource(dqn)


def test_private_hooks_that_mixins_override_exist():
    for cls, name in (
        (Learner, "_make_batch_if_necessary"),
        (Algorithm, "_create_local_replay_buffer_if_necessary"),
    ):
        assert callable(getattr(cls, name))
    # Learner.update's batch path calls it; Algorithm.setup builds the buffer with it.
    assert "self._make_batch_if_necessary(training_data=training_data)" in inspect.getsource(
        learner_module
    )
    assert "self.local_replay_buffer = self._create_local_replay_buffer_if_necessary(" in (
        inspect.getsource(Algorithm.setup)
    )
    # Ray adds `_ray_trace_ctx` to a class's methods once it runs as an actor (remote
    # learners in other tests); it is not part of RLlib's signature.
    parameters = inspect.signature(Learner._make_batch_if_necessary).parameters
    assert [p for p in parameters if p != "_ray_trace_ctx"] == ["self", "training_data"]
    # ObservesBatchBeforeLoss: TorchLearner._update(batch) takes the update's tensor batch
    # and runs the loss (through the possibly compiled update).
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    parameters = inspect.signature(TorchLearner._update).parameters
    assert [p for p in parameters if p != "_ray_trace_ctx"] == ["self", "batch"]
    assert "compute_losses" in inspect.getsource(TorchLearner._uncompiled_update)
    # update_on_minibatches: Learner.update's loop body is one _update per minibatch,
    # between the before/after hooks, bumping _weights_seq_no once.
    update_source = inspect.getsource(Learner.update)
    assert "self.before_gradient_based_update(" in update_source
    assert "self._weights_seq_no += 1" in update_source
    assert "self._update(\n                    tensor_minibatch.policy_batches" in update_source
    assert "self.after_gradient_based_update(" in update_source
    assert "self._log_steps_trained_metrics(tensor_minibatch)" in update_source
    # reorder: SampleBatch.shuffle permutes every column in place and clears its cache.
    shuffle_source = inspect.getsource(SampleBatch.shuffle)
    assert "self.update(shuffled)" in shuffle_source
    assert "self.intercepted_values = {}" in shuffle_source
    # local_learner: the learner group keeps its local learner in _learner.
    from ray.rllib.core.learner.learner_group import LearnerGroup

    assert "self._learner = " in inspect.getsource(LearnerGroup.__init__)
    # AveragesGradientsOverLearners: build() wraps the modules last; the uncompiled
    # update runs these steps in this order, entering no_sync() with several learners.
    assert (
        inspect.getsource(TorchLearner.build)
        .rstrip()
        .endswith("self._make_modules_ddp_if_necessary()")
    )
    steps = inspect.getsource(TorchLearner._uncompiled_update)
    order = [
        "self._compute_off_policyness(batch)",
        "self.module.forward_train(batch)",
        "self.compute_losses(",
        "self.compute_gradients(",
        "mod.no_sync()",
        "self.postprocess_gradients(",
        "self.apply_gradients(",
    ]
    assert all(step in steps for step in order)
    assert sorted(order, key=steps.index) == order
    # RestoresOptimizerStateUnshared: the restored buffers are tensors made from the
    # state's arrays by convert_to_torch_tensor.
    restore = inspect.getsource(TorchLearner._set_optimizer_state)
    assert "convert_to_torch_tensor(" in restore and ".load_state_dict(" in restore


def test_priority_trees_of_both_buffers():
    single = PrioritizedEpisodeReplayBuffer(capacity=100, alpha=0.6)
    tree, indices, alpha = priority_trees(single)
    assert alpha == 0.6 and list(indices) == [] and tree.capacity >= 100
    multi = MultiAgentPrioritizedEpisodeReplayBuffer(capacity=100, alpha=0.7)
    tree, indices, alpha = priority_trees(multi, "m")
    assert alpha == 0.7 and list(indices) == []


def test_no_private_rllib_name_outside_the_compat_module():
    outside = [
        path
        for folder in ("marllib_ext", "tests", "benchmarks", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if path.name not in ("test_rllib_compat.py", "private_access.py")
        and path.parent.name not in ("data", "rllib_compat")
    ]
    assert private_accesses(outside) == []
    compat = private_accesses(sorted((PACKAGE / "rllib_compat").glob("*.py")))
    assert any("_env_to_module" in hit for hit in compat), compat  # the check sees them
    config_reads = subprocess.run(
        ["git", "grep", "-n", "-E", r"learner_config_dict\[|TD_ERROR_KEY", "--", str(PACKAGE)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.splitlines()
    assert all(line.startswith("marllib_ext/rllib_compat/") for line in config_reads)


def test_the_private_access_check_finds_each_kind(tmp_path):
    sample = ROOT / "tests" / "data" / "private_access_sample.py"
    hits = private_accesses([sample])
    for expected in (
        "._learner_connector",
        "_no_metrics_reduce=",
        "super(...) with arguments",
        "_forward",
        "import ray.tune.registry._global_registry",
    ):
        assert any(hit.endswith(expected) for hit in hits), (expected, hits)


def test_settings_are_frozen_plain_data():
    settings = algos.mappo().settings("toy:coordination")
    assert dataclasses.is_dataclass(settings)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.lr = 1.0


def _episode(episode_class, agents):
    return episode_class(
        observations=[{a: np.zeros(1) for a in agents}, {a: np.ones(1) for a in agents}],
        actions=[{a: 0 for a in agents}],
        rewards=[{a: 1.0 for a in agents}],
        infos=[{a: {"step": 0} for a in agents}, {a: {"step": 1} for a in agents}],
        observation_space=gym.spaces.Dict({a: gym.spaces.Box(-1, 1, (1,)) for a in agents}),
        action_space=gym.spaces.Dict({a: gym.spaces.Discrete(2) for a in agents}),
        len_lookback_buffer=0,
    )


def test_episode_agent_sets_iterate_in_sorted_order():
    """RLlib still builds the three agent sets in MultiAgentEpisode; the package's
    episodes hand them out sorted, whatever the hash seed, through set operations, cuts
    and slices; RLlib's own class hands out plain sets."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    from marllib_ext.rllib_compat.episodes import SortedAgentsEpisode, SortedAgentSet

    agents = [f"agent_{i}" for i in (3, 0, 11, 2)]
    episode = _episode(SortedAgentsEpisode, agents)
    for agent_set in (
        episode.agent_ids,
        episode.get_agents_to_act(),
        episode.get_agents_that_stepped(),
    ):
        assert isinstance(agent_set, SortedAgentSet)
        assert list(agent_set) == sorted(agents)
        assert agent_set == set(agents) and agent_set - {"agent_0"} == set(agents) - {"agent_0"}
        for combined in (
            agent_set | {"agent_1"},
            {"agent_1"} | agent_set,
            agent_set - {"agent_0"},
            agent_set & set(agents[:3]),
            agent_set ^ {"agent_0", "agent_7"},
            agent_set.union(["agent_9"]),
            agent_set.copy(),
        ):
            assert isinstance(combined, SortedAgentSet)
            assert list(combined) == sorted(combined, key=str)
    for part in (episode.cut(), episode[1:], episode.slice(slice(0, 1))):
        assert type(part) is SortedAgentsEpisode
    plain = _episode(MultiAgentEpisode, agents)
    assert type(plain.agent_ids) is set and type(plain.get_agents_to_act()) is set
    assert type(plain.cut()) is MultiAgentEpisode


def test_the_package_runner_and_learners_read_sorted_agents_episodes(ray_session):
    """Episodes the package's runner starts (and their continuations) are
    ``SortedAgentsEpisode``; an RLlib episode handed to a learner that reads episodes
    (``ReadsEpisodesAsSortedAgents``, as the replay learners; a replay buffer builds
    RLlib's class) is read as one."""
    from ray.rllib.core.learner.training_data import TrainingData
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    from marllib_ext.rllib_compat import ReadsEpisodesAsSortedAgents
    from marllib_ext.rllib_compat.episodes import SortedAgentsEpisode

    class BuildsFromEpisodes:
        def _make_batch_if_necessary(self, training_data):
            return training_data

    reading = type("Reading", (ReadsEpisodesAsSortedAgents, BuildsFromEpisodes), {})()

    for sampler in ("episode_chunks", "per_world"):  # chunks from arrays; RLlib's path
        config = algos.mappo(**SMALL).rllib_config("mpe:simple_spread", seed=0, sampler=sampler)
        algorithm = config.build_algo()
        try:
            runner = algorithm.env_runner
            assert (runner.array_rollout is None) == (sampler == "per_world")
            for _ in range(2):  # the second call continues the first's episodes (cut)
                episodes = runner.sample(num_timesteps=40, random_actions=False)
                assert {type(e) for e in episodes} == {SortedAgentsEpisode}
            replayed = episodes[0]
            replayed.__class__ = MultiAgentEpisode  # as RLlib's replay buffers build them
            reading._make_batch_if_necessary(TrainingData(episodes=[replayed]))
            assert type(replayed) is SortedAgentsEpisode
        finally:
            algorithm.stop()


def test_rllib_counts_and_carries_rollout_blocks_as_episodes(ray_session):
    """``CountedAsEpisodes``: RLlib's synchronous sampling counts a runner's rollout
    blocks toward its target with ``env_steps()`` and hands them on untouched."""
    pytest.importorskip("vmas", reason="the vmas extra is not installed")
    from marllib_ext import make_env
    from marllib_ext.rllib_compat import sample_episodes
    from marllib_ext.rollout.blocks import RolloutBlock

    config = algos.mappo(
        hyperparam_source="vmas", train_batch_size=160, minibatch_size=80, num_epochs=1
    ).rllib_config(
        make_env("vmas:navigation", max_steps=10), seed=0, num_env_runners=0,
        num_envs_per_env_runner=4,
    )  # fmt: skip
    algorithm = config.build_algo()
    try:
        blocks, _ = sample_episodes(algorithm.env_runner_group, None)
    finally:
        algorithm.stop()
    assert blocks and all(isinstance(block, RolloutBlock) for block in blocks)
    assert sum(len(block) for block in blocks) == sum(b.env_steps() for b in blocks) >= 160
    assert all(block.agent_steps() == block.alive.sum() for block in blocks)


UNCHANGED_BY_IMPORT = """
import sys, inspect
import ray.rllib.algorithms.ppo, ray.rllib.algorithms.sac, ray.rllib.env.multi_agent_env_runner
import ray.rllib.env.multi_agent_episode, ray.rllib.core.learner.torch.torch_learner
import gymnasium, pettingzoo


def snapshot():
    seen = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith(("ray.", "gymnasium", "pettingzoo")):
            continue
        for attr, value in list(vars(module).items()):
            if inspect.isclass(value) and value.__module__ == name:
                for key, member in vars(value).items():
                    if key != "__slotnames__":  # copyreg's cache, set by any copy
                        seen[(name, attr, key)] = id(member)
    return seen


before = snapshot()
import ray
ray.init(num_cpus=1, include_dashboard=False, configure_logging=False, log_to_driver=False)
from marllib_ext import algos
config = algos.mappo(num_env_runners=0, train_batch_size=100, minibatch_size=50, num_epochs=1)
algorithm = config.rllib_config("mpe:simple_spread", seed=0).build_algo()
algorithm.train()
algorithm.stop()
after = snapshot()
classes = {key[:2] for key in before}
changed = sorted(str(key) for key in before if after.get(key) != before[key])
changed += sorted(str(key) for key in after if key not in before and key[:2] in classes)
print("CHANGED", len(changed), changed[:20])
"""


def test_importing_and_training_changes_no_library_class():
    """A process that imports ``marllib_ext`` and trains keeps every class of RLlib,
    Ray, gymnasium, PettingZoo, torch and numpy loaded before as it was: no attribute
    replaced, added or removed (plain RLlib code behaves as without the package)."""
    done = subprocess.run(
        [sys.executable, "-c", UNCHANGED_BY_IMPORT], capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("CHANGED")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    assert lines[-1] == "CHANGED 0 []"


def test_env_runner_internals_the_batched_rollout_uses(ray_session):
    """The seed, reset flag, weights version, metric caches and connector builders that
    ``rollout.ArrayRollout`` reads from a real ``MultiAgentEnvRunner``."""
    from collections import defaultdict

    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    from marllib_ext.rllib_compat import env_runners as compat

    config = algos.mappo(train_batch_size=200, minibatch_size=100, num_epochs=1).rllib_config(
        "toy:coordination", seed=5, num_env_runners=0
    )
    algorithm = config.build_algo()
    try:
        runner = algorithm.env_runner
        assert compat.runner_seed(runner) == 5
        assert compat.custom_connectors(config) == (None, None)
        assert isinstance(compat.weights_seq_no(runner), int)
        compat.set_needs_initial_reset(runner, True)
        assert compat.needs_initial_reset(runner)
        runner.sample(num_timesteps=10)
        assert not compat.needs_initial_reset(runner)  # RLlib cleared it on its reset
        assert compat.time_after_sampling(runner) is not None
        done, ongoing = compat.metrics_episode_caches(runner)
        assert isinstance(done, list) and isinstance(ongoing, defaultdict)
    finally:
        algorithm.stop()
    efx_config = algos.efx_mappo().rllib_config("toy:coordination", seed=5, num_env_runners=0)
    assert compat.custom_connectors(efx_config)[0] is not None
    episode = MultiAgentEpisode(observations=[{"a": np.zeros(1)}, {"a": np.ones(1)}],
                                actions=[{"a": 0}], rewards=[{"a": 1.0}])  # fmt: skip
    compat.set_episode_times(episode, 10.0, 12.5)
    assert episode.get_duration_s() == pytest.approx(2.5)


@pytest.mark.parametrize("env", ["mpe:simple_spread", "toy:come_and_go"])
def test_episode_slices_keep_every_agents_infos(ray_session, env):
    """RLlib's MultiAgentEpisode.slice drops the infos (every one ``{}``); after the
    package's import a slice keeps them: the two slices at every cut hold, env step by
    env step, the infos of the episode they came from (absent agents included)."""
    from marllib_ext.rollout.episode_steps import chunk_step_infos

    # RLlib's own slices: the per-world sampler.
    algorithm = algos.mappo(**SMALL).rllib_config(env, seed=0, sampler="per_world").build_algo()
    try:
        runner = algorithm.env_runner
        episodes = runner.sample(num_timesteps=60, random_actions=False)
    finally:
        algorithm.stop()
    episode = max(episodes, key=len)
    whole = chunk_step_infos(episode)
    assert all(info and "state" in info for info in whole)
    for cut in range(1, len(episode)):
        head = episode[:cut]
        tail = episode.slice(slice(cut, None), len_lookback_buffer=1)
        assert chunk_step_infos(head) == whole[: cut + 1]
        assert chunk_step_infos(tail) == whole[cut:]
