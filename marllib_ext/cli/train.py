"""``marllib-ext train``: one run of a registered algorithm, with a checkpoint at the end."""

from __future__ import annotations

import argparse

from marllib_ext.cli.arguments import check_tracking, parse_assignments, stop_from_args
from marllib_ext.cli.progress import format_row, print_run_start
from marllib_ext.cli.ray_setup import init_ray


def evaluation_overrides(args: argparse.Namespace) -> dict:
    """``--eval-every``, ``--eval-episodes``, ``--eval-explore`` and ``--eval-video-every``
    as settings."""
    out = {}
    if args.eval_every is not None:
        out["evaluation_interval"] = args.eval_every
    if args.eval_episodes is not None:
        out["evaluation_duration"] = args.eval_episodes
    if args.eval_explore:
        out["evaluation_explore"] = True
    if args.eval_video_every is not None:
        out["evaluation_video_interval"] = args.eval_video_every
    return out


def cmd_train(args: argparse.Namespace) -> int:
    from marllib_ext import algos
    from marllib_ext.envs import make_env

    overrides = {**parse_assignments(args.set, "--set"), **evaluation_overrides(args)}
    env = make_env(args.env, **parse_assignments(args.env_arg, "--env-arg"))
    algo = algos.get(args.algo, args.hyperparam_source)
    stop = stop_from_args(args)
    # Validate everything before Ray starts, so bad input costs nothing.
    algo.rllib_config(env, share_policy=args.share_policy, seed=args.seed, **overrides)
    check_tracking(args)

    init_ray(args)
    print(
        f"training {args.algo} on {env.name} (share_policy={args.share_policy}, stop={stop})",
        flush=True,
    )
    try:
        result = algo.fit(
            env,
            stop=stop,
            share_policy=args.share_policy,
            seed=args.seed,
            local_dir=args.local_dir,
            checkpoint_freq=args.checkpoint_freq,
            resume_from=args.resume,
            wandb=args.wandb,
            mlflow=True if args.mlflow == "" else args.mlflow,
            on_start=print_run_start,
            on_iteration=lambda row: print(format_row(row, algo.spec.progress_columns), flush=True),
            **overrides,
        )
    finally:
        import ray

        ray.shutdown()
    print(f"progress: {result.run_dir / 'progress.csv'}")
    print(f"checkpoint: {result.checkpoint_path}")
    return 0
