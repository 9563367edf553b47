"""How well a joint critic fits its targets over a run, read from the runs' TensorBoard
events (``learners/<critic>/vf_explained_var`` and ``vf_loss``), and how often a
recurrent critic starts a row's episode from a fresh state at a block's first step.

    python benchmarks/critic_fit.py --runs "runs/smax_3m/mappo+use_rnn=true" \\
        "runs/smax_3m/mappo+use_rnn=true+critic_use_rnn=true" --last 10
    python benchmarks/critic_fit.py --fresh-share smax:3m --blocks 3

Each ``--runs`` folder's seeds (``seed<k>/<run>/tb``) give one row: the mean over seeds
(with min and max) of each tag's mean over the last ``--last`` iterations and over the
whole run. ``--fresh-share ENV`` samples ``--blocks`` blocks with ``mappo``'s source
for the env and prints the share of env steps whose world was mid-episode when the
block began and had not reset since (where a recurrent critic runs from a state
reset at the block's start instead of the one it would have carried).
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import common
import numpy as np

TAGS = ("vf_explained_var", "vf_loss")


def scalars(events_file: Path) -> dict[str, list[float]]:
    """Every scalar of a TensorBoard events file (TFRecord framing: an 8-byte length,
    4-byte CRC, the ``Event`` proto, 4-byte CRC), by tag, in step order."""
    from tensorboardX.proto.event_pb2 import Event

    data = events_file.read_bytes()
    out: dict[str, list[float]] = {}
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        event = Event()
        event.ParseFromString(data[pos + 12 : pos + 12 + length])
        pos += 12 + length + 4
        for value in event.summary.value:
            out.setdefault(value.tag, []).append(value.simple_value)
    return out


def run_fit(label_dir: Path, last: int, critic: str) -> dict[str, list[float]]:
    """Per seed: each tag's mean over the last ``last`` iterations and over the run."""
    rows: dict[str, list[float]] = {}
    for events in sorted(label_dir.glob("seed*/*/tb/events.out.tfevents.*")):
        values = scalars(events)
        for tag in TAGS:
            series = values.get(f"learners/{critic}/{tag}")
            if not series:
                raise SystemExit(f"{events}: no learners/{critic}/{tag} (not a joint-critic run?)")
            rows.setdefault(f"{tag} (last {last})", []).append(float(np.mean(series[-last:])))
            rows.setdefault(f"{tag} (run)", []).append(float(np.mean(series)))
    if not rows:
        raise SystemExit(f"{label_dir}: no seed*/<run>/tb events")
    return rows


def fresh_share(env_name: str, blocks: int) -> float:
    """The share of a block's env steps before its world's first reset, in worlds that
    were mid-episode when the block began (the first block of a run is skipped: every
    world starts there)."""
    import ray

    from marllib_ext import algos, make_env
    from marllib_ext.rllib_compat import reset_before_next_sample

    common.start_ray(num_cpus=1)
    try:
        env = make_env(env_name)
        algorithm = algos.get("mappo", num_env_runners=0).rllib_config(env, seed=0).build_algo()
        runner = algorithm.env_runner
        rollout = runner.array_rollout
        reset_before_next_sample(runner)
        batch = algorithm.config.train_batch_size
        runner.sample(num_timesteps=batch)  # the first sample: every world starts
        fresh, total = 0, 0
        for _ in range(blocks):
            if rollout is None:  # RLlib's per-world path: one chunk per episode segment
                for chunk in runner.sample(num_timesteps=batch):
                    steps = chunk.env_t - chunk.env_t_started
                    fresh += steps if chunk.env_t_started > 0 else 0
                    total += steps
                continue
            block = rollout._block(rollout._run(batch // rollout.num_envs, True, False))
            ended = block.terminated | block.truncated
            for world in range(block.terminated.shape[1]):
                if block.starts[0, world]:
                    continue
                first_end = np.flatnonzero(ended[:, world])
                fresh += int(first_end[0]) + 1 if len(first_end) else len(ended)
            total += block.terminated.size
        algorithm.stop()
        return fresh / total
    finally:
        ray.shutdown()


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--runs", nargs="*", type=Path, default=[])
    parser.add_argument("--last", type=int, default=10)
    parser.add_argument("--critic", default="joint_critic")
    parser.add_argument("--fresh-share", metavar="ENV")
    parser.add_argument("--blocks", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    for label_dir in args.runs:
        for tag, values in run_fit(label_dir, args.last, args.critic).items():
            print(
                f"{label_dir.name} | {tag} | {np.mean(values):.3f} "
                f"[{min(values):.3f}, {max(values):.3f}] | {len(values)} seeds"
            )
    if args.fresh_share:
        share = fresh_share(args.fresh_share, args.blocks)
        print(f"{args.fresh_share}: {share:.3f} of env steps before a world's first reset")


if __name__ == "__main__":
    main()
