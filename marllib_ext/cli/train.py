"""``marllib-ext train``: one run of a registered algorithm, with a checkpoint at the end.

The run comes from the command line, a run file (``--config``, the fields of
:class:`marllib_ext.configs.run_file.RunSpec`) with the command line on top, or a
checkpoint's saved ``config.yaml`` (``--resume``), which the command line may not
contradict."""

from __future__ import annotations

import argparse
import dataclasses

from marllib_ext.cli.arguments import check_tracking, parse_assignments, stop_given
from marllib_ext.cli.progress import format_row, print_run_start
from marllib_ext.cli.ray_setup import init_ray
from marllib_ext.configs.run_file import RunSpec, load_yaml, resumed_run, saved_run
from marllib_ext.errors import ConfigError

DEFAULT_ENV = "mpe:simple_spread"
DEFAULT_STOP = {"training_iteration": 10}  # as stop_from_args


def evaluation_overrides(args: argparse.Namespace) -> dict:
    """``--eval-every``, ``--eval-episodes``, ``--eval-final-episodes``, ``--eval-explore``
    and ``--eval-video-every`` as settings."""
    out = {}
    if args.eval_every is not None:
        out["evaluation_interval"] = args.eval_every
    if args.eval_episodes is not None:
        out["evaluation_duration"] = args.eval_episodes
    if args.eval_final_episodes is not None:
        out["evaluation_final_episodes"] = args.eval_final_episodes
    if args.eval_explore:
        out["evaluation_explore"] = True
    if args.eval_video_every is not None:
        out["evaluation_video_interval"] = args.eval_video_every
    return out


def run_of(args: argparse.Namespace, default_env: str) -> tuple[RunSpec, set[str]]:
    """The run the command line (on top of ``--config``) asks for, and the names of the
    fields it states."""
    base, given = RunSpec(algo="", env=default_env), set()
    if args.config:
        data = load_yaml(args.config)
        base = RunSpec.from_mapping(data, where=args.config)
        given = set(data)
    stated = {
        "algo": args.algo,
        "env": args.env,
        "source": args.hyperparam_source,
        "share_policy": args.share_policy,
        "seed": args.seed,
    }
    stated = {key: value for key, value in stated.items() if value is not None}
    env_args = parse_assignments(args.env_arg, "--env-arg")
    if env_args:
        stated["env_args"] = {**base.env_args, **env_args}
    given |= set(stated)
    run = dataclasses.replace(
        base,
        **stated,
        set={**base.set, **parse_assignments(args.set, "--set")},
        stop={**base.stop, **stop_given(args)},
        evaluation={**base.evaluation, **evaluation_overrides(args)},
    )
    return run, given


def resolve_run(args: argparse.Namespace, default_env: str) -> RunSpec:
    """The run to train: asked for, or continued from ``--resume`` (its saved config,
    which what is asked may not contradict)."""
    asked, given = run_of(args, default_env)
    if args.resume is None:
        if not asked.algo:
            raise ConfigError("train needs an algorithm (or --config FILE, or --resume CHECKPOINT)")
        return asked
    saved = saved_run(args.resume)
    return resumed_run(saved, asked, given)


def cmd_train(args: argparse.Namespace) -> int:
    from marllib_ext import algos
    from marllib_ext.envs import make_env

    run = resolve_run(args, DEFAULT_ENV)
    env = make_env(run.env, **run.env_args)
    algo = algos.get(run.algo, run.source)
    stop = run.stop or dict(DEFAULT_STOP)
    # Validate everything before Ray starts, so bad input costs nothing.
    share_policy = algo.share_policy(env, run.share_policy)
    algo.rllib_config(env, share_policy=share_policy, seed=run.seed, **run.overrides())
    if args.print_config:
        resolved = algo.run_spec(
            env, share_policy=share_policy, seed=run.seed, stop=stop, **run.overrides()
        )
        print(resolved.dump(), end="")
        return 0
    check_tracking(args)

    init_ray(args)
    print(
        f"training {run.algo} on {env.name} (share_policy={share_policy}, stop={stop})"
        + (f", resuming {args.resume}" if args.resume else ""),
        flush=True,
    )
    try:
        result = algo.fit(
            env,
            stop=stop,
            share_policy=share_policy,
            seed=run.seed,
            local_dir=args.local_dir,
            checkpoint_freq=args.checkpoint_freq,
            resume_from=args.resume,
            wandb=args.wandb,
            mlflow=True if args.mlflow == "" else args.mlflow,
            on_start=print_run_start,
            on_iteration=lambda row: print(format_row(row, algo.spec.progress_columns), flush=True),
            **run.overrides(),
        )
    finally:
        import ray

        ray.shutdown()
    print(f"progress: {result.run_dir / 'progress.csv'}")
    print(f"checkpoint: {result.checkpoint_path}")
    return 0
