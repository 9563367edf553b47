"""The argument parser: one sub-command per module of this package."""

from __future__ import annotations

import argparse

from marllib_ext.cli import benchmark as benchmark_command
from marllib_ext.cli import evaluate as evaluate_command
from marllib_ext.cli import listing as list_command
from marllib_ext.cli import plot as plot_command
from marllib_ext.cli import report as report_command
from marllib_ext.cli import train as train_command
from marllib_ext.cli import tune as tune_command

DEFAULT_ENV = train_command.DEFAULT_ENV


def _add_training_arguments(train: argparse.ArgumentParser, *, optional_algo: bool) -> None:
    if optional_algo:
        train.add_argument(
            "algo",
            nargs="?",
            default=None,
            help="registered algorithm, see `marllib-ext list` (optional with --config "
            "or --resume)",
        )
        train.add_argument("--env", default=None, help=f"env name (default {DEFAULT_ENV})")
    else:
        train.add_argument("algo", help="registered algorithm, see `marllib-ext list`")
        train.add_argument("--env", default=DEFAULT_ENV, help=f"env name (default {DEFAULT_ENV})")
    train.add_argument(
        "--set",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="override hyperparameters from the algorithm's YAML (one or more; repeatable)",
    )
    train.add_argument(
        "--env-arg",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="env constructor arguments, e.g. N=4 (one or more; repeatable)",
    )
    train.add_argument(
        "--hyperparam-source",
        default=None,
        metavar="SOURCE",
        help="the algorithm YAML's section to use (default: the env's family; "
        "`marllib-ext list --sources` lists them)",
    )
    train.add_argument(
        "--share-policy",
        default=None,
        choices=["all", "group", "individual"],
        help="policy sharing (default: what the env and algorithm allow: `all` on one "
        "cooperative team, `group` on mixed teams, `individual` for happo/hatrpo)",
    )
    stop = train.add_argument_group("stop (any reached ends training; default 10 iterations)")
    stop.add_argument("--stop-iters", type=int, default=None, metavar="N", help="iterations")
    stop.add_argument(
        "--stop-timesteps", type=int, default=None, metavar="N", help="env steps sampled"
    )
    stop.add_argument(
        "--stop-reward", type=float, default=None, metavar="R", help="mean team episode return"
    )
    train.add_argument("--seed", type=int, default=None, help="seed of networks, envs and sampling")
    tracking = train.add_argument_group("experiment tracking (besides TensorBoard)")
    tracking.add_argument(
        "--wandb",
        default=None,
        metavar="PROJECT",
        help="log to this Weights & Biases project (WANDB_MODE=offline: no account needed)",
    )
    tracking.add_argument(
        "--mlflow",
        nargs="?",
        const="",
        default=None,
        metavar="TRACKING_URI",
        help="log to MLflow (default: sqlite:///<run dir>/mlflow.db)",
    )
    train.add_argument("--local-dir", default="runs", help="where run directories go")


def _add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs for the local Ray")
    parser.add_argument(
        "--address",
        default=None,
        help="existing Ray cluster to join (default: $RAY_ADDRESS, else local)",
    )
    parser.add_argument("--verbose", action="store_true", help="show Ray worker logs")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of this process and OMP_NUM_THREADS of its Ray workers "
        "(default: --num-cpus, else the cores available; runs side by side on a few "
        "cores: their share, e.g. 1; 0: torch's default)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="marllib-ext", description="MARLlib-style multi-agent RL on Ray RLlib"
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module first (e.g. one that registers your own env)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train an algorithm and save a checkpoint")
    _add_training_arguments(train, optional_algo=True)
    train.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="a run file (YAML: algo, source, set, env, env_args, share_policy, seed, stop, "
        "evaluation); flags given on the command line take precedence",
    )
    train.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved run (every setting) as YAML and exit",
    )
    train.add_argument(
        "--checkpoint-freq",
        type=int,
        default=0,
        metavar="N",
        help="also checkpoint every N iterations (always at the end)",
    )
    train.add_argument(
        "--resume",
        default=None,
        metavar="CHECKPOINT",
        help="continue a run from its checkpoint, with the algorithm, env, sharing and "
        "settings of its saved config.yaml (a conflicting flag is refused)",
    )
    evaluation = train.add_argument_group(
        "evaluation during training (marl-eval records in the run's metrics.json)"
    )
    evaluation.add_argument(
        "--eval-every",
        type=int,
        default=None,
        metavar="N",
        help="evaluate every N iterations (setting evaluation_interval)",
    )
    evaluation.add_argument(
        "--eval-episodes",
        type=int,
        default=None,
        metavar="M",
        help="episodes per evaluation (setting evaluation_duration, default 32)",
    )
    evaluation.add_argument(
        "--eval-final-episodes",
        type=int,
        default=None,
        metavar="F",
        help="episodes of the best policy's end-of-run re-evaluation (setting "
        "evaluation_final_episodes; default 10 x M, 0: none)",
    )
    evaluation.add_argument(
        "--eval-explore",
        action="store_true",
        help="sample actions in evaluations (default: greedy)",
    )
    evaluation.add_argument(
        "--eval-video-every",
        type=int,
        default=None,
        metavar="K",
        help="a GIF of one episode every K evaluations (setting evaluation_video_interval)",
    )
    _add_ray_arguments(train)
    train.set_defaults(func=train_command.cmd_train)

    tune_cmd = commands.add_parser("tune", help="grid sweep with Ray Tune, then a results table")
    _add_training_arguments(tune_cmd, optional_algo=False)
    tune_cmd.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="values to try (default: the algorithm YAML's search section)",
    )
    tune_cmd.add_argument("--num-samples", type=int, default=1, help="repeats of each point")
    _add_ray_arguments(tune_cmd)
    tune_cmd.set_defaults(func=tune_command.cmd_tune)

    bench = commands.add_parser(
        "benchmark",
        help="run an experiment file's algorithms x tasks x seeds on Ray Tune (again: continue)",
    )
    bench.add_argument("file", metavar="FILE", help="experiment file (YAML), see docs/running.md")
    bench.add_argument(
        "--out",
        default="results",
        metavar="DIR",
        help="where the experiment's folder goes (default: results/; on a cluster, a path "
        "every node shares)",
    )
    bench.add_argument(
        "--max-concurrent",
        type=int,
        default=None,
        metavar="N",
        help="trials at once (default: as many as the cluster's CPUs and GPUs fit)",
    )
    bench.add_argument(
        "--dry-run", action="store_true", help="list the trials and their budgets, run nothing"
    )
    bench.add_argument(
        "--progress-every",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds between progress lines (default 30)",
    )
    _add_ray_arguments(bench)
    bench.set_defaults(func=benchmark_command.cmd_benchmark)

    evaluate = commands.add_parser("evaluate", help="run a trained team from a checkpoint")
    evaluate.add_argument("checkpoint", help="checkpoint directory written by train")
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to play (default 10)")
    evaluate.add_argument(
        "--z",
        type=evaluate_command.budget_argument,
        default=None,
        help="EFX algorithms: fixed budget z at every episode start (default: the trained "
        "deployment budget), or 'auto': the largest z whose team return stays within "
        "--tolerance of the return at z_low (bisection)",
    )
    evaluate.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="--z auto: allowed drop in team return (default: 5%% of the return at z_low)",
    )
    evaluate.add_argument(
        "--bisect-iters", type=int, default=6, help="--z auto: bisection steps (default 6)"
    )
    evaluate.add_argument(
        "--z-sweep",
        type=int,
        default=None,
        metavar="K",
        help="EFX algorithms: play K budgets spread over [z_low, z_high] (--episodes each) "
        "and print extrinsic and intrinsic return; --out FILE.png plots them",
    )
    evaluate.add_argument(
        "--deterministic",
        action="store_true",
        help="greedy actions (z then stays at its start value)",
    )
    evaluate.add_argument(
        "--render", default=None, choices=["rgb_array"], help="render every step of one env"
    )
    evaluate.add_argument(
        "--out", default=None, help="directory for rendered frames; with --z-sweep, the plot"
    )
    evaluate.add_argument(
        "--video", default=None, metavar="FILE.gif", help="write the rendered episodes as a GIF"
    )
    evaluate.add_argument(
        "--partner",
        default=None,
        metavar="CHECKPOINT",
        help="cross-play: another run's checkpoint whose policies play --partner-agents",
    )
    evaluate.add_argument(
        "--partner-agents",
        nargs="+",
        default=None,
        metavar="AGENT",
        help="--partner: the slots its policies play (default: the second half of the "
        "sorted agents, agent_1 of two)",
    )
    _add_ray_arguments(evaluate)
    evaluate.set_defaults(func=evaluate_command.cmd_evaluate)

    plot = commands.add_parser("plot", help="learning curves (mean, min-max over runs)")
    plot.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="a run directory, or a folder of runs (one curve each)",
    )
    plot.add_argument("--out", default="curves.png", help="image file to write")
    plot.add_argument("--title", default=None, help="figure title")
    plot.add_argument(
        "--metric", default="agent_return_mean", help="progress.csv column on the y axis"
    )
    plot.add_argument(
        "--smooth-steps",
        type=float,
        default=0,
        help="average each run's metric over its rows in the last N env steps first",
    )
    plot.set_defaults(func=plot_command.cmd_plot)

    report = commands.add_parser(
        "report", help="IQM, probability of improvement and profiles of runs' evaluations"
    )
    report.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directories (or folders of them) with marl-eval metrics.json files",
    )
    report.add_argument("--out", required=True, help="folder for report.md and the plots")
    report.add_argument(
        "--metric",
        default=None,
        help="marl-eval metric (default: win_rate if recorded, else return)",
    )
    report.add_argument(
        "--normalize",
        choices=["minmax", "none"],
        default=None,
        help="per-task score scaling (default: minmax for returns, none for win rates)",
    )
    report.add_argument("--reps", type=int, default=2000, help="bootstrap replicates")
    report.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    report.add_argument(
        "--crossplay",
        action="store_true",
        help="instead: the runs x runs matrix of team returns, each row's team with the "
        "column's policies in the partner slots (crossplay.md and crossplay.png; the "
        "diagonal is self-play); RUN_DIRs are runs with a checkpoint",
    )
    report.add_argument(
        "--episodes", type=int, default=10, help="--crossplay: episodes per pair (default 10)"
    )
    report.add_argument(
        "--partner-agents",
        nargs="+",
        default=None,
        metavar="AGENT",
        help="--crossplay: the partner's slots (default: the second half of the sorted agents)",
    )
    report.add_argument("--deterministic", action="store_true", help="--crossplay: greedy actions")
    _add_ray_arguments(report)
    report.set_defaults(func=report_command.cmd_report)

    list_cmd = commands.add_parser("list", help="list algorithms and envs")
    list_cmd.add_argument(
        "--markdown",
        action="store_true",
        help="print the algorithm and env tables as in the README",
    )
    list_cmd.add_argument(
        "--sources",
        action="store_true",
        help="print each algorithm's hyperparameter sources (--hyperparam-source values)",
    )
    list_cmd.add_argument(
        "--schedules",
        action="store_true",
        help="print each on-policy algorithm's update schedule (docs/design.md's table)",
    )
    list_cmd.set_defaults(func=list_command.cmd_list)
    return parser
