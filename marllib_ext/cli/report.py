"""``marllib-ext report``: aggregate statistics of runs' evaluations (``marllib_ext.report``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def run_checkpoint(run_dir: Path) -> Path:
    """A run's final checkpoint (``RUN_DIR/checkpoint``), or the folder itself where it
    is one."""
    from marllib_ext.algos.restore import CONSTRUCTOR_FILE
    from marllib_ext.errors import ConfigError

    for candidate in (run_dir / "checkpoint", run_dir):
        if (candidate / CONSTRUCTOR_FILE).exists():
            return candidate
    raise ConfigError(f"--crossplay: {str(run_dir)!r} holds no checkpoint")


def cmd_crossplay(args: argparse.Namespace) -> int:
    import ray

    from marllib_ext.algos.evaluation.crossplay import crossplay_matrix, write_crossplay
    from marllib_ext.cli.ray_setup import init_ray

    runs = [Path(d) for d in args.run_dirs]
    checkpoints = [run_checkpoint(d) for d in runs]
    init_ray(args)
    try:
        matrix = crossplay_matrix(
            checkpoints,
            labels=[d.name for d in runs],
            partner_agents=args.partner_agents,
            episodes=args.episodes,
            explore=not args.deterministic,
        )
    finally:
        ray.shutdown()
    path = write_crossplay(matrix, Path(args.out))
    print(f"self-play mean {matrix.self_play:.3f}, cross-play mean {matrix.cross_play:.3f}")
    print(f"wrote {path} and {path.with_suffix('.png')}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from marllib_ext.report import find_metric_files, load_records, report_data, write_report

    if getattr(args, "crossplay", False):
        return cmd_crossplay(args)

    files = find_metric_files(args.run_dirs)
    data = report_data(load_records(files), metric=args.metric, normalize=args.normalize)
    write_report(data, Path(args.out), reps=args.reps, seed=args.seed)
    print(f"{len(files)} record file(s), {len(data.tasks)} task(s), algorithms {data.algorithms}")
    print(f"wrote {Path(args.out) / 'report.md'} and its plots")
    return 0
