"""Command line: ``marllib-ext train|list``. Thin: YAML -> typed config -> RLlib."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import sys
from collections import Counter
from typing import Any

import numpy as np
import yaml

from marllib_ext.errors import ConfigError

DEFAULT_ENV = "mpe:simple_spread"


def parse_assignments(pairs: list[str], flag: str) -> dict[str, Any]:
    """``["lr=0.001", "actor_hiddens=[64, 64]"]`` -> typed dict (YAML values)."""
    values = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects key=value, got {pair!r}")
        value = yaml.safe_load(raw) if raw else ""
        if isinstance(value, str):
            with contextlib.suppress(ValueError):  # YAML 1.1 reads "1e-3" as a string
                value = float(value)
        values[key.strip()] = value
    return values


def _stop_from_args(args: argparse.Namespace) -> dict[str, float]:
    stop: dict[str, float] = {}
    if args.stop_iters is not None:
        stop["training_iteration"] = args.stop_iters
    if args.stop_timesteps is not None:
        stop["timesteps_total"] = args.stop_timesteps
    if args.stop_reward is not None:
        stop["episode_return_mean"] = args.stop_reward
    return stop or {"training_iteration": 10}


def parse_grid(pairs: list[str]) -> dict[str, list[Any]]:
    """``["lr=1e-4,3e-4"]`` -> ``{"lr": [0.0001, 0.0003]}`` (each value read as YAML)."""
    grid = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip() or not raw:
            raise ConfigError(f"--grid expects key=v1,v2,..., got {pair!r}")
        items = [f"{key.strip()}={item}" for item in raw.split(",")]
        grid[key.strip()] = [parse_assignments([item], "--grid")[key.strip()] for item in items]
    return grid


def cmd_tune(args: argparse.Namespace) -> int:
    import ray

    from marllib_ext.algos.config import search_space
    from marllib_ext.algos.registry import get_algo_spec
    from marllib_ext.envs import make_env
    from marllib_ext.sweeps import format_table, sweep

    get_algo_spec(args.algo)
    grid = parse_grid(args.grid) or search_space(args.algo)
    env = make_env(args.env, **parse_assignments(args.env_arg, "--env-arg"))
    init_ray(args)
    try:
        summaries = sweep(
            args.algo,
            env,
            grid=grid,
            stop=_stop_from_args(args),
            num_samples=args.num_samples,
            share_policy=args.share_policy,
            seed=args.seed,
            hyperparam_source=args.hyperparam_source,
            local_dir=args.local_dir,
            **parse_assignments(args.set, "--set"),
        )
    finally:
        ray.shutdown()
    print(format_table(summaries))
    return 0 if all(summary.error is None for summary in summaries) else 1


def init_ray(args: argparse.Namespace) -> None:
    """A local Ray, or the cluster at ``--address`` / ``RAY_ADDRESS`` (``ray job submit``)."""
    import ray

    from marllib_ext.algos.api import ray_address

    address = ray_address(args.address)
    if address != "local":
        if args.num_cpus is not None:
            raise ConfigError("--num-cpus applies to a local Ray only, not with --address")
        ray.init(address=address, configure_logging=False, log_to_driver=args.verbose)
    else:
        ray.init(
            address=address,
            num_cpus=args.num_cpus,
            include_dashboard=False,
            configure_logging=False,
            log_to_driver=args.verbose,
        )


def _format_row(row: dict[str, float], columns=()) -> str:
    """The progress line; ``columns``: the algorithm's own progress columns, shown once
    the first of them has a value."""
    extra = ""
    if columns and not math.isnan(row.get(columns[0].name, math.nan)):
        extra = " | " + " ".join(f"{c.label} {row[c.name]:{c.fmt}}" for c in columns)
    return (
        f"iter {row['training_iteration']:4d} | env steps {row['timesteps_total']:8d} | "
        f"episode return {row['episode_return_mean']:9.3f} "
        f"(per agent {row['agent_return_mean']:8.3f}) | "
        f"{row['time_this_iter_s']:6.2f} s/iter, {row['time_total_s']:7.1f} s total{extra}"
        + _runner_health(row)
    )


def _runner_health(row: dict[str, float]) -> str:
    total = row.get("env_runners", math.nan)
    if not total or math.isnan(total):
        return ""
    return f" | env runners {int(row['env_runners_healthy'])}/{int(total)} healthy"


def _print_runner_nodes(algorithm) -> None:
    """Which Ray node serves each remote env runner (a multi-node run shows several)."""
    import ray

    counts = Counter(
        algorithm.env_runner_group.foreach_env_runner(
            lambda runner: ray.get_runtime_context().get_node_id(), local_env_runner=False
        )
    )
    if counts:
        served = ", ".join(f"{node} x{count}" for node, count in sorted(counts.items()))
        print(f"env runners on nodes: {served}", flush=True)


def cmd_train(args: argparse.Namespace) -> int:
    from marllib_ext import algos
    from marllib_ext.envs import make_env

    overrides = parse_assignments(args.set, "--set")
    env = make_env(args.env, **parse_assignments(args.env_arg, "--env-arg"))
    algo = algos.get(args.algo, args.hyperparam_source)
    stop = _stop_from_args(args)
    # Validate everything before Ray starts, so bad input costs nothing.
    algo.rllib_config(env, share_policy=args.share_policy, seed=args.seed, **overrides)

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
            on_start=_print_runner_nodes,
            on_iteration=lambda row: print(
                _format_row(row, algo.spec.progress_columns), flush=True
            ),
            **overrides,
        )
    finally:
        import ray

        ray.shutdown()
    print(f"progress: {result.run_dir / 'progress.csv'}")
    print(f"checkpoint: {result.checkpoint_path}")
    return 0


def _budget_argument(value: str) -> float | str:
    if value == "auto":
        return value
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {value!r}") from None


def _format_budget_table(points) -> str:
    lines = [f"{'z':>10} {'team extrinsic':>15} {'team intrinsic':>15} {'success rate':>13}"]
    for point in points:
        success = "-" if point.success_rate is None else f"{point.success_rate:.3f}"
        lines.append(
            f"{point.z:10.3f} {point.extrinsic_return:15.3f} {point.intrinsic_return:15.3f} "
            f"{success:>13}"
        )
    return "\n".join(lines)


def _evaluate_budgets(args: argparse.Namespace) -> int:
    from marllib_ext.algos.evaluation import choose_budget, plot_budget_sweep, sweep_budgets

    if args.z_sweep is not None:
        points = sweep_budgets(args.checkpoint, points=args.z_sweep, episodes=args.episodes)
        print(f"budget sweep, {args.episodes} episodes per budget (sampled actions):")
        print(_format_budget_table(points))
        if args.out:
            print(f"plot: {plot_budget_sweep(points, args.out, title=str(args.checkpoint))}")
        return 0
    choice = choose_budget(
        args.checkpoint,
        tolerance=args.tolerance,
        episodes=args.episodes,
        iterations=args.bisect_iters,
    )
    print(_format_budget_table(choice.points))
    print(
        f"z auto: {choice.z:.4g} (largest z whose team extrinsic return stays within "
        f"{choice.tolerance:.4g} of {choice.reference_return:.4g}, the return at z_low)"
    )
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    import ray

    from marllib_ext.algos.evaluation import evaluate

    if args.z_sweep is not None and args.z is not None:
        raise ConfigError("--z-sweep and --z are exclusive")
    if args.z_sweep is not None and args.render:
        raise ConfigError("--z-sweep does not render; drop --render")
    init_ray(args)
    try:
        if args.z_sweep is not None or args.z == "auto":
            return _evaluate_budgets(args)
        result = evaluate(
            args.checkpoint,
            episodes=args.episodes,
            z=args.z,
            explore=not args.deterministic,
            render=args.render,
            out=args.out,
        )
    finally:
        ray.shutdown()
    budget = "" if result.budget_z is None else f" at budget z={result.budget_z:g}"
    print(f"evaluated {len(result.team_returns)} episodes{budget}")
    print(f"team return mean {result.team_return_mean:.3f}")
    for agent_id, returns in sorted(result.agent_returns.items()):
        print(f"  {agent_id}: return mean {np.mean(returns):.3f}")
    print(f"per-agent return mean {result.agent_return_mean:.3f}")
    if args.render:
        print(f"frames: {result.n_frames} PNG files in {args.out}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from marllib_ext.plotting import plot_runs

    print(f"wrote {plot_runs(args.run_dirs, args.out, metric=args.metric, title=args.title)}")
    return 0


def _share_modes(info) -> list[str]:
    modes = ["group"]
    if info.all_agents_one_policy:
        modes.insert(0, "all")
    if info.one_agent_one_policy:
        modes.append("individual")
    return modes


def env_table_markdown() -> str:
    """The README's env table, from the registry (each env built once for its agents)."""
    from marllib_ext.envs import list_envs, make_env
    from marllib_ext.envs.registry import builtin_env_names

    lines = [
        "| name | agents | teams (one joint critic each) | share_policy allowed |",
        "|------|--------|-------------------------------|----------------------|",
    ]
    specs = list_envs()
    for name in builtin_env_names():
        spec = specs[name]
        layout = make_env(name).layout
        agents = ", ".join(f"`{a}`" for a in layout.agents)
        teams = "; ".join(f"{team}: {len(agents)}" for team, agents in layout.teams.items())
        lines.append(
            f"| `{name}` | {agents} | {teams} | {', '.join(_share_modes(spec.policy_mapping))} |"
        )
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> int:
    from marllib_ext.algos import ALGORITHMS
    from marllib_ext.envs import list_envs
    from marllib_ext.envs.by_name import ENV_FAMILIES

    if args.markdown:
        print(env_table_markdown())
        return 0

    print("algorithms:")
    width = max(map(len, ALGORITHMS))
    for name, spec in ALGORITHMS.items():
        print(f"  {name:<{width}} {spec.family:<3} {spec.description}")
    print("envs:")
    for name, spec in list_envs().items():
        info = spec.policy_mapping
        modes = "|".join(_share_modes(info))
        print(f"  {name:<28} share_policy: {modes:<22} {info.description}")
    print("env families (give an id):")
    for family in ENV_FAMILIES:
        needs = f'pip install -e ".[{family.extra}]"' if family.extra else "no extra"
        print(f"  {family.pattern:<28} {family.description}; e.g. {family.example} ({needs})")
    print("  (single-agent algorithms also take any registered gymnasium id)")
    return 0


def _add_training_arguments(train: argparse.ArgumentParser) -> None:
    train.add_argument("algo", help="registered algorithm, see `marllib-ext list`")
    train.add_argument("--env", default=DEFAULT_ENV, help=f"env name (default {DEFAULT_ENV})")
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a hyperparameter from the algorithm's YAML",
    )
    train.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env constructor argument, e.g. N=4",
    )
    train.add_argument(
        "--hyperparam-source", default=None, help="YAML section to use (default: the env's family)"
    )
    train.add_argument("--share-policy", default="all", choices=["all", "group", "individual"])
    stop = train.add_argument_group("stop (any reached ends training; default 10 iterations)")
    stop.add_argument("--stop-iters", type=int, default=None)
    stop.add_argument("--stop-timesteps", type=int, default=None)
    stop.add_argument("--stop-reward", type=float, default=None)
    train.add_argument("--seed", type=int, default=None)
    train.add_argument("--local-dir", default="runs", help="where run directories go")


def _add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs for the local Ray")
    parser.add_argument(
        "--address",
        default=None,
        help="existing Ray cluster to join (default: $RAY_ADDRESS, else local)",
    )
    parser.add_argument("--verbose", action="store_true", help="show Ray worker logs")


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
    _add_training_arguments(train)
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
        help="continue from a checkpoint of the same algorithm",
    )
    _add_ray_arguments(train)
    train.set_defaults(func=cmd_train)

    tune_cmd = commands.add_parser("tune", help="grid sweep with Ray Tune, then a results table")
    _add_training_arguments(tune_cmd)
    tune_cmd.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="values to try (default: the algorithm YAML's search section)",
    )
    tune_cmd.add_argument("--num-samples", type=int, default=1, help="repeats of each point")
    _add_ray_arguments(tune_cmd)
    tune_cmd.set_defaults(func=cmd_tune)

    evaluate = commands.add_parser("evaluate", help="run a trained team from a checkpoint")
    evaluate.add_argument("checkpoint", help="checkpoint directory written by train")
    evaluate.add_argument("--episodes", type=int, default=10)
    evaluate.add_argument(
        "--z",
        type=_budget_argument,
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
    _add_ray_arguments(evaluate)
    evaluate.set_defaults(func=cmd_evaluate)

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
    plot.set_defaults(func=cmd_plot)

    list_cmd = commands.add_parser("list", help="list algorithms and envs")
    list_cmd.add_argument(
        "--markdown", action="store_true", help="print the env table as in the README"
    )
    list_cmd.set_defaults(func=cmd_list)
    return parser


def import_user_modules(modules: list[str]) -> None:
    """Imports ``--import`` modules the way ``python -m`` finds them: the current
    directory first. Ray workers started from here inherit it through PYTHONPATH, so
    they can unpickle the user's env factories too."""
    cwd = os.getcwd()
    if modules and cwd not in sys.path:
        sys.path.insert(0, cwd)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (cwd, os.environ.get("PYTHONPATH")) if p
        )
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"--import {module}: {e}") from e
        except Exception as e:  # noqa: BLE001 - the user's module failed while importing
            raise ConfigError(f"--import {module}: {type(e).__name__}: {e}") from e


def main(argv: list[str] | None = None) -> int:
    # Ray's deprecation chatter is not for end users of the CLI.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        import_user_modules(args.imports)
        return args.func(args)
    except ConfigError as e:
        print(f"marllib-ext: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
