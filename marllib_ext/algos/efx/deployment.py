"""EFX at test time: playing a trained checkpoint at chosen budgets z, the sweep over
``[floor, z_high]`` (``evaluate --z-sweep K``) and the choice of the largest budget that
keeps the extrinsic return (``evaluate --z auto``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from marllib_ext.algos.efx.callbacks import budget_connector, episode_team_intrinsic
from marllib_ext.algos.restore import check_checkpoint, restored_algorithm
from marllib_ext.errors import ConfigError
from marllib_ext.ops.efx import largest_budget_within
from marllib_ext.plotting import save_figure
from marllib_ext.rllib_compat import settings_of


def has_budget(env_runner) -> bool:
    return budget_connector(env_runner) is not None


def budget_range(env_runner):
    """``(z_low, z_high)`` of a one-team EFX run; ``None`` without a budget. A run with
    one budget per team fails here (one z cannot be chosen for several teams)."""
    connector = budget_connector(env_runner)
    return None if connector is None else (connector.controller.z_low, connector.controller.z_high)


def budget_floor(env_runner) -> float:
    """The controller's floor (``z_low`` unless the run tracked it)."""
    return budget_connector(env_runner).controller.floor


def set_fixed_budget(env_runner, z: float | None):
    """Every following episode at ``z`` (``None``: each team's deployment budget)."""
    connector = budget_connector(env_runner)
    if connector is not None:
        connector.play_fixed(None if z is None else float(z))


def current_budget(env_runner) -> float | None:
    """The one-team deployment budget (``None`` without a budget or with several teams)."""
    connector = budget_connector(env_runner)
    if connector is None or len(connector.controllers) != 1:
        return None
    return connector.budget


def checked_budget_range(runner, flag: str) -> tuple[float, float]:
    """``budget_range``, or an error naming ``flag`` for a run without a budget."""
    trained_range = budget_range(runner)
    if trained_range is None:
        raise ConfigError(f"{flag} needs a checkpoint of an EFX algorithm (efx_mappo)")
    return trained_range


def play_at_budget(runner, z: float | None) -> float | None:
    """Before evaluation episodes: every episode of an EFX run at ``z`` (checked within
    the trained range; ``None``: each team's deployment budget); the one-team budget
    played (``None`` without a budget)."""
    if has_budget(runner):
        if z is not None:
            low, high = budget_range(runner)
            if not low <= z <= high:
                raise ConfigError(f"--z {z} is outside the trained budget range [{low}, {high}]")
        set_fixed_budget(runner, z)
    elif z is not None:
        checked_budget_range(runner, "--z")
    return current_budget(runner)


@dataclass(frozen=True)
class BudgetPoint:
    """Team returns of ``episodes`` episodes all started at budget ``z``."""

    z: float
    extrinsic_return: float
    intrinsic_return: float
    success_rate: float | None  # None: the env reports no info["success"]
    episodes: int


def play_episodes(runner, episodes: int, *, coef: float, z: float | None = None) -> BudgetPoint:
    """``episodes`` episodes with sampled actions, all started at budget ``z`` (None:
    the runner's current setting, also for algorithms without a budget); the intrinsic
    return is ``-coef * sum_t sum_i log pi``."""
    if z is not None:
        set_fixed_budget(runner, z)
    played = runner.sample(num_episodes=episodes, explore=True, force_reset=True)[:episodes]
    successes = []
    for episode in played:
        flags = [
            bool(info.get("success"))
            for agent_episode in episode.agent_episodes.values()
            for info in agent_episode.get_infos()
            if isinstance(info, dict) and "success" in info
        ]
        if flags:
            successes.append(any(flags))
    return BudgetPoint(
        z=math.nan if z is None else float(z),
        extrinsic_return=float(np.mean([e.get_return() for e in played])),
        intrinsic_return=float(np.mean([episode_team_intrinsic([e], coef=coef) for e in played])),
        success_rate=float(np.mean(successes)) if successes else None,
        episodes=len(played),
    )


def _intrinsic_coef(algorithm) -> float:
    return float(settings_of(algorithm.config).intrinsic_coef)


def sweep_budgets(checkpoint: str | Path, *, points: int, episodes: int = 10) -> list[BudgetPoint]:
    """``points`` budgets evenly spread over the trained ``[floor, z_high]`` (``floor =
    z_low`` unless the run tracked it), each played for ``episodes`` episodes with
    sampled actions (as in training)."""
    path = check_checkpoint(checkpoint, episodes)
    if points < 2:
        raise ConfigError(f"--z-sweep needs at least 2 budgets, got {points}")
    with restored_algorithm(path) as algorithm:
        runner = algorithm.env_runner
        _, high = checked_budget_range(runner, "--z-sweep")
        floor = budget_floor(runner)
        coef = _intrinsic_coef(algorithm)
        return [
            play_episodes(runner, episodes, coef=coef, z=z)
            for z in np.linspace(floor, high, points)
        ]


@dataclass(frozen=True)
class BudgetChoice:
    """``--z auto``: the largest budget within ``tolerance`` of the return at ``z_low``."""

    z: float
    reference_return: float  # team extrinsic return at z_low (no exploration demand)
    tolerance: float
    points: list[BudgetPoint]


def choose_budget(
    checkpoint: str | Path,
    *,
    tolerance: float | None = None,
    episodes: int = 10,
    iterations: int = 6,
) -> BudgetChoice:
    """Largest z whose team extrinsic return stays within ``tolerance`` of the return at
    ``z_low`` (z = 0 with intrinsic bounds), by bisection (``ops.largest_budget_within``).
    ``tolerance`` defaults to 5% of that reference return's magnitude."""
    path = check_checkpoint(checkpoint, episodes)
    if tolerance is not None and tolerance < 0:
        raise ConfigError(f"--tolerance must be >= 0, got {tolerance}")
    with restored_algorithm(path) as algorithm:
        runner = algorithm.env_runner
        low, high = checked_budget_range(runner, "--z auto")
        coef = _intrinsic_coef(algorithm)
        points: dict[float, BudgetPoint] = {}

        def play(z: float) -> BudgetPoint:
            if z not in points:
                points[z] = play_episodes(runner, episodes, coef=coef, z=z)
            return points[z]

        reference = play(low).extrinsic_return
        allowed = 0.05 * abs(reference) if tolerance is None else float(tolerance)
        z, _ = largest_budget_within(  # below the floor a budget demands nothing
            lambda z: play(z).extrinsic_return,
            z_low=budget_floor(runner),
            z_high=high,
            target=reference - allowed,
            iterations=iterations,
        )
    return BudgetChoice(z, reference, allowed, sorted(points.values(), key=lambda p: p.z))


def plot_budget_sweep(points: list[BudgetPoint], out: str | Path, *, title: str = "") -> Path:
    """Team extrinsic and intrinsic return against z (two y axes); needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    z = [p.z for p in points]
    figure, extrinsic_axis = plt.subplots(figsize=(6, 4))
    extrinsic_axis.plot(z, [p.extrinsic_return for p in points], "o-", color="tab:blue")
    extrinsic_axis.set_xlabel("budget z (team intrinsic return to collect)")
    extrinsic_axis.set_ylabel("team extrinsic return", color="tab:blue")
    intrinsic_axis = extrinsic_axis.twinx()
    intrinsic_axis.plot(z, [p.intrinsic_return for p in points], "s--", color="tab:orange")
    intrinsic_axis.plot(z, z, ":", color="gray", linewidth=1)
    intrinsic_axis.set_ylabel("team intrinsic return (dotted: = z)", color="tab:orange")
    if title:
        extrinsic_axis.set_title(title)
    return save_figure(figure, out)
