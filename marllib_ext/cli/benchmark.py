"""``marllib-ext benchmark FILE``: an experiment file's algorithm x task x seed grid on
Ray Tune (``marllib_ext.experiments``)."""

from __future__ import annotations

import argparse


def cmd_benchmark(args: argparse.Namespace) -> int:
    from marllib_ext.cli.ray_setup import init_ray
    from marllib_ext.experiments import load_experiment, run_benchmark
    from marllib_ext.experiments.launch import checked_trials

    experiment = load_experiment(args.file)
    if args.dry_run:
        return run_benchmark(experiment, out=args.out, dry_run=True)
    checked_trials(experiment)  # bad input costs nothing: checked before Ray starts
    init_ray(args)
    import ray

    try:
        return run_benchmark(
            experiment,
            out=args.out,
            max_concurrent=args.max_concurrent,
            imports=args.imports,
            progress_every_s=args.progress_every,
        )
    finally:
        ray.shutdown()
