"""``marllib-ext evaluate``: run a trained team from a checkpoint; for EFX algorithms at
a chosen budget z, over a sweep of budgets, or at the budget bisection picks."""

from __future__ import annotations

import argparse

import numpy as np

from marllib_ext.cli.ray_setup import init_ray
from marllib_ext.errors import ConfigError


def budget_argument(value: str) -> float | str:
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
    from marllib_ext.algos.efx.deployment import choose_budget, plot_budget_sweep, sweep_budgets

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
    partner = getattr(args, "partner", None)
    if partner is not None and (args.z is not None or args.z_sweep is not None or args.render):
        raise ConfigError("--partner plays two runs together; drop --z, --z-sweep and --render")
    if partner is None and getattr(args, "partner_agents", None):
        raise ConfigError("--partner-agents needs --partner")
    init_ray(args)
    try:
        if args.z_sweep is not None or args.z == "auto":
            return _evaluate_budgets(args)
        if partner is not None:
            from marllib_ext.algos.evaluation.crossplay import crossplay

            result = crossplay(
                args.checkpoint,
                partner,
                partner_agents=args.partner_agents,
                episodes=args.episodes,
                explore=not args.deterministic,
            )
        else:
            result = evaluate(
                args.checkpoint,
                episodes=args.episodes,
                z=args.z,
                explore=not args.deterministic,
                render=args.render,
                out=args.out,
                video=args.video,
            )
    finally:
        ray.shutdown()
    budget = "" if result.budget_z is None else f" at budget z={result.budget_z:g}"
    actions = (
        "greedy actions" if args.deterministic else "sampled actions (--deterministic: greedy)"
    )
    partnered = "" if partner is None else f" with {partner} playing the partner slots"
    print(f"evaluated {len(result.team_returns)} episodes{budget}{partnered}, actions {actions}")
    print(f"team return mean {result.team_return_mean:.3f}")
    for agent_id, returns in sorted(result.agent_returns.items()):
        print(f"  {agent_id}: return mean {np.mean(returns):.3f}")
    print(f"per-agent return mean {result.agent_return_mean:.3f}")
    if result.success_rate is not None:  # e.g. SMAX: the win rate
        print(f"success rate {result.success_rate:.3f} ({len(result.successes)} episodes)")
    if args.render and args.out:
        print(f"frames: {result.n_frames} PNG files in {args.out}")
    if args.video:
        print(f"video: {result.n_frames} frames in {args.video}")
    return 0
