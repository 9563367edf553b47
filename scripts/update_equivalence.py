"""One learner update from a fixed start, as a digest of the weights after it.

``record`` builds each algorithm from ``--seed``, samples one iteration's episodes in
the driver and saves them with the learners' state (weights and optimizer) to
``--snapshots``; ``check`` loads that state into a fresh build, runs the same update on
the same episodes and prints one SHA-256 of every module's weights per algorithm and
number of learners. Run ``record`` and ``check`` on one version of the code and
``check`` on another: equal digests mean the two versions train bit-identically.

    python scripts/update_equivalence.py record --snapshots /tmp/snapshots
    python scripts/update_equivalence.py check --snapshots /tmp/snapshots > before.txt

``rows`` builds the learner's batch from the recorded episodes, without updating, and
prints one SHA-256 per module of its rows as a set: the loss-mask rows' columns rounded
to 4 decimals and sorted. Equal ``rows`` digests with different ``check`` digests mean
two versions build the same rows in another order (and so other minibatches).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import sys
from pathlib import Path

import numpy as np

ALGORITHMS = ("mappo", "happo", "hatrpo", "coma", "mappo_cup")
LEARNER_COUNTS = (0, 2)
BATCH = 200
COST_ENV = "mpe:simple_spread"  # mappo_cup needs info["cost"]


def build(name: str, num_learners: int, seed: int, env_name: str = "toy:coordination"):
    from marllib_ext import algos
    from marllib_ext.algos.ppo.schedule import rllib_phase
    from marllib_ext.algos.registry import ALGORITHMS as SPECS
    from marllib_ext.errors import ConfigError

    minibatch_key = rllib_phase(SPECS[name].schedule).minibatch_size
    whole_batch = getattr(SPECS[name].settings("toy"), minibatch_key) is None
    settings = {
        "hyperparam_source": "toy",
        "num_learners": num_learners,
        "num_env_runners": 0,
        "train_batch_size": BATCH,
        minibatch_key: None if whole_batch else BATCH // 2,
    }
    if hasattr(SPECS[name].settings("toy"), "fisher_subsample"):
        settings["fisher_subsample"] = 1  # the recorded digests' step (hatrpo's default is 5)
    env = COST_ENV if SPECS[name].capabilities.needs_costs else env_name
    share = "individual" if SPECS[name].capabilities.sequential else "all"
    algo = algos.get(name, **settings)
    try:  # episode chunks, so the digests compare what learners build from one set
        config = algo.rllib_config(env, share_policy=share, seed=seed, sampler="episode_chunks")
    except (TypeError, ConfigError):  # code without the sampler setting: see below
        config = algo.rllib_config(env, share_policy=share, seed=seed)
    algorithm = config.build_algo()
    chunks_from_setter(algorithm.env_runner)
    return algorithm


def weights_digest(algorithm) -> str:
    from marllib_ext.rllib_compat import plain_module

    def weights(learner):
        return {
            module_id: {
                key: value.detach().cpu().numpy().copy()
                for key, value in plain_module(learner.module, module_id).state_dict().items()
            }
            for module_id in sorted(learner.module.keys())
        }

    per_learner = [ref.get() for ref in algorithm.learner_group.foreach_learner(weights)]
    digest = hashlib.sha256()
    for module_id, params in per_learner[0].items():
        for key in sorted(params):
            digest.update(f"{module_id}/{key}".encode())
            digest.update(np.ascontiguousarray(params[key]).tobytes())
    return digest.hexdigest()[:16]


ROW_COLUMNS = (
    "obs", "actions", "action_logp", "advantages", "value_targets", "state", "coma_inputs",
    "cost_advantages", "cost_value_targets", "happo_team_row",
)  # fmt: skip


def rows_digests(algorithm, episodes) -> list[tuple[str, tuple[int, str]]]:
    """Per module of the learner's batch from ``episodes`` (``train_batch``: the chunks
    read as rollout blocks, then the family's builder): the number of loss-mask
    rows and a digest of them as a set (``ROW_COLUMNS`` but the team row index, whose
    values depend on the row order, rounded to 4 decimals, rows sorted)."""
    from ray.rllib.core.learner.training_data import TrainingData

    def build(learner):
        batch = learner.train_batch(TrainingData(episodes=episodes))
        out = []
        for module_id in sorted(batch.policy_batches):
            columns = batch.policy_batches[module_id]
            mask = columns["loss_mask"].numpy().astype(bool)
            parts = []
            for name in ROW_COLUMNS[:-1]:
                if name not in columns:
                    continue
                value = columns[name]
                value = value["observation"] if isinstance(value, dict) else value
                value = value.numpy().astype(np.float64).reshape(len(mask), -1)[mask]
                parts.append(np.round(value, 4) + 0.0)  # no negative zeros
            rows = np.concatenate(parts, axis=1)
            rows = rows[np.lexsort(rows.T[::-1])]
            out.append((module_id, (len(rows), hashlib.sha256(rows.tobytes()).hexdigest()[:16])))
        return out

    return next(iter(algorithm.learner_group.foreach_learner(build))).get()


def seed_learners(algorithm, seed: int) -> None:
    """Seeds the global RNGs every learner draws from (RLlib's minibatch shuffle)."""

    def seed_all(learner):
        import random

        import torch

        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    algorithm.learner_group.foreach_learner(seed_all)


def as_runner_episodes(episodes: list) -> list:
    """The recorded episodes as the package's env runner starts them
    (``SortedAgentsEpisode``, whose slices keep their infos), where the code has that
    class; older code changed RLlib's own class at import."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    try:
        from marllib_ext.rllib_compat.episodes import as_sorted_agents_episode
    except ImportError:
        return episodes
    return [
        as_sorted_agents_episode(e) if isinstance(e, MultiAgentEpisode) else e for e in episodes
    ]


def chunks_from_setter(env_runner) -> None:
    """On code whose runners chose their output through a setter (no ``sampler``
    setting): hand episode chunks, not rollout blocks."""
    rollout = getattr(env_runner, "array_rollout", None)
    if rollout is not None and not hasattr(rollout, "hands_blocks"):
        rollout.blocks_refusal = "update_equivalence"


def update(algorithm, episodes) -> None:
    config = algorithm.config
    algorithm.learner_group.update(
        episodes=episodes,
        timesteps={"num_env_steps_sampled_lifetime": BATCH},
        num_epochs=config.num_epochs,
        minibatch_size=config.minibatch_size,
        shuffle_batch_per_epoch=config.shuffle_batch_per_epoch,
    )


def main() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":
        # The learner connectors iterate over sets of episode ids: string hashes must
        # not vary between processes (Ray's learner actors inherit the variable).
        os.execve(
            sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"}
        )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("record", "check", "rows"))
    parser.add_argument("--snapshots", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--algos", nargs="*", default=list(ALGORITHMS))
    parser.add_argument(
        "--env", default="toy:coordination", help="the env of every algorithm without costs"
    )
    args = parser.parse_args()

    import ray
    import torch

    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    args.snapshots.mkdir(parents=True, exist_ok=True)
    for name in args.algos:
        for num_learners in LEARNER_COUNTS:
            path = args.snapshots / f"{name}_{num_learners}.pkl"
            if args.mode == "rows" and num_learners:
                continue  # the batch of the learner in the driver
            torch.manual_seed(args.seed)
            algorithm = build(name, num_learners, args.seed, args.env)
            try:
                if args.mode == "record":
                    episodes = algorithm.env_runner.sample(num_timesteps=BATCH)
                    state = algorithm.learner_group.get_state()
                    path.write_bytes(pickle.dumps((state, episodes)))
                    continue
                state, episodes = pickle.loads(path.read_bytes())
                episodes = as_runner_episodes(episodes)
                if args.mode == "rows":
                    algorithm.learner_group.set_state(state)
                    for module_id, (count, digest) in rows_digests(algorithm, episodes):
                        print(f"{name} {module_id} {count} rows {digest}")
                    continue
                algorithm.learner_group.set_state(state)
                before = weights_digest(algorithm)
                seed_learners(algorithm, args.seed)
                update(algorithm, episodes)
                print(f"{name} num_learners={num_learners} {before} -> {weights_digest(algorithm)}")
            finally:
                algorithm.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
