"""``marllib-ext tune``: a grid sweep with Ray Tune, then a results table."""

from __future__ import annotations

import argparse

from marllib_ext.cli.arguments import (
    check_tracking,
    parse_assignments,
    parse_grid,
    stop_from_args,
)
from marllib_ext.cli.ray_setup import init_ray


def cmd_tune(args: argparse.Namespace) -> int:
    import ray

    from marllib_ext.algos.registry import get_algo_spec
    from marllib_ext.configs.algo_files import search_space
    from marllib_ext.envs import make_env
    from marllib_ext.sweeps import format_table, sweep

    get_algo_spec(args.algo)
    grid = parse_grid(args.grid) or search_space(args.algo)
    env = make_env(args.env, **parse_assignments(args.env_arg, "--env-arg"))
    check_tracking(args)
    init_ray(args)
    try:
        summaries = sweep(
            args.algo,
            env,
            grid=grid,
            stop=stop_from_args(args),
            num_samples=args.num_samples,
            share_policy=args.share_policy,
            seed=args.seed,
            hyperparam_source=args.hyperparam_source,
            local_dir=args.local_dir,
            wandb=args.wandb,
            mlflow=True if args.mlflow == "" else args.mlflow,
            **parse_assignments(args.set, "--set"),
        )
    finally:
        ray.shutdown()
    print(format_table(summaries))
    return 0 if all(summary.error is None for summary in summaries) else 1
