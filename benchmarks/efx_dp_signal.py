"""How much per-step extrinsic signal each EFX advantage form keeps, on real batches.

Trains ``efx_mappo`` for a few iterations per ``efx_advantage`` form on one task and
records, in the advantage connector's hooks on the team arrays, every acting row's
episode step t (the rows of episodes that began inside the sample), its extrinsic
advantage and its final (pre-standardization) advantage. Prints per form:
the fraction of rows that keep their own ``A_ext`` (final == own value, up to the
affine standardization), the binding fraction, the correlation between the final and
the own extrinsic advantage, and the mean standardized final advantage by episode
step, which shows the time trend the seed's running minimum introduces.

    python benchmarks/efx_dp_signal.py --task mpe:simple_spread --iterations 1 \
        --checkpoint runs/efx_evidence/mpe-simple_spread/efx_hinge/seed0/checkpoint
"""

from __future__ import annotations

from pathlib import Path

import common
import numpy as np
import ray

from marllib_ext import algos, make_env
from marllib_ext.algos.efx import EFXJointCriticLearner
from marllib_ext.ops.advantages import standardize_valid
from marllib_ext.postprocessing.efx_advantage import EFXJointAdvantageConnector

RECORDS: list[dict] = []


def episode_steps(block) -> np.ndarray:
    """``(T, B)`` each row's step within its episode, counted from the episode starts
    the block holds (``-1`` before a world's first start: its episode began earlier)."""
    horizon, worlds = block.terminated.shape
    steps = np.full((horizon, worlds), -1)
    for b in range(worlds):
        step = -1
        for t in range(horizon):
            started = block.starts is not None and block.starts[t, b]
            step = 0 if started else (step + 1 if step >= 0 else -1)
            steps[t, b] = step
    return steps


class RecordingConnector(EFXJointAdvantageConnector):
    def adjust_block_advantages(self, teams, metrics):
        out = super().adjust_block_advantages(teams, metrics)
        for team, final in zip(teams, out, strict=True):
            steps = episode_steps(team.block)
            rows = team.acting & (steps >= 0)
            RECORDS.append(
                {"t": steps[rows], "a_ext": team.advantages[rows], "a_final": final[rows]}
            )
        return out


class RecordingLearner(EFXJointCriticLearner):
    advantage_connector_class = RecordingConnector


def measure(task: str, form: str, iterations: int, seed: int, checkpoint: Path | None) -> dict:
    config = (
        algos.efx_mappo(num_env_runners=0, efx_advantage=form)
        .rllib_config(make_env(task), seed=seed)
        .learners(learner_class=RecordingLearner)
    )
    algorithm = config.build_algo()
    try:
        if checkpoint is not None:  # a trained critic: A_ext no longer tracks t
            algorithm.restore_from_path(str(checkpoint.resolve()))
        for _ in range(iterations):
            RECORDS.clear()  # keep the last iteration only
            algorithm.train()
    finally:
        algorithm.stop()
    t = np.concatenate([r["t"] for r in RECORDS])
    a_ext = np.concatenate([r["a_ext"] for r in RECORDS])
    a_final = np.concatenate([r["a_final"] for r in RECORDS])
    # per_step / hinge return min(Â_ext, cap): compare in standardized units.
    own = (
        a_ext
        if form == "seed_dp"
        else np.concatenate(
            [standardize_valid(r["a_ext"], np.ones(len(r["a_ext"]), bool)) for r in RECORDS]
        )
    )
    final_std = standardize_valid(a_final, np.ones(len(a_final), bool))
    bins = np.minimum(t // 5, 4)
    return {
        "keeps_own": float(np.mean(np.isclose(a_final, own))),
        "corr": float(np.corrcoef(a_final, a_ext)[0, 1]),
        "by_step": [float(final_std[bins == b].mean()) for b in range(5)],
    }


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--task", default="mpe:simple_spread")
    parser.add_argument("--forms", nargs="+", default=["seed_dp", "per_step", "hinge"])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--checkpoint", type=Path, default=None, help="start from this efx_mappo checkpoint"
    )
    args = parser.parse_args()
    common.start_ray(num_cpus=2)
    results = {
        form: measure(args.task, form, args.iterations, args.seed, args.checkpoint)
        for form in args.forms
    }
    ray.shutdown()
    start = f"from {args.checkpoint}" if args.checkpoint else "from scratch"
    print(f"{args.task}, last of {args.iterations} iterations {start}, defaults otherwise")
    header = "mean standardized final advantage at t = 0-4 / 5-9 / 10-14 / 15-19 / 20+"
    print(f"{'form':<9} {'rows keeping own A_ext':>23} {'corr(final, A_ext)':>19}  {header}")
    for form, r in results.items():
        trend = " / ".join(f"{v:+.2f}" for v in r["by_step"])
        print(f"{form:<9} {r['keeps_own']:23.3f} {r['corr']:19.3f}  {trend}")


if __name__ == "__main__":
    main()
