"""Run a trained team from a checkpoint without training, optionally at a chosen budget z."""

from __future__ import annotations

import contextlib
import math
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from marllib_ext.envs.handle import EnvHandle
from marllib_ext.envs.registry import list_envs
from marllib_ext.errors import ConfigError
from marllib_ext.rllib_compat import settings_of


@dataclass(frozen=True)
class EvaluationResult:
    """Returns of ``episodes`` complete episodes."""

    team_returns: list[float]
    agent_returns: dict[str, list[float]]
    budget_z: float | None
    n_frames: int = 0

    @property
    def team_return_mean(self) -> float:
        return float(np.mean(self.team_returns))

    @property
    def agent_return_mean(self) -> float:
        return float(np.mean([np.mean(v) for v in self.agent_returns.values()]))


def _has_budget(env_runner) -> bool:
    from marllib_ext.algos.efx import budget_connector

    return budget_connector(env_runner) is not None


def _budget_range(env_runner):
    """``(z_low, z_high)`` of a one-team EFX run; ``None`` without a budget. A run with
    one budget per team fails here (one z cannot be chosen for several teams)."""
    from marllib_ext.algos.efx import budget_connector

    connector = budget_connector(env_runner)
    return None if connector is None else (connector.controller.z_low, connector.controller.z_high)


def _budget_floor(env_runner) -> float:
    """The controller's floor (``z_low`` unless the run tracked it)."""
    from marllib_ext.algos.efx import budget_connector

    return budget_connector(env_runner).controller.floor


def _set_fixed_budget(env_runner, z: float | None):
    """Every following episode at ``z`` (``None``: each team's deployment budget)."""
    from marllib_ext.algos.efx import budget_connector

    connector = budget_connector(env_runner)
    if connector is not None:
        connector.play_fixed(None if z is None else float(z))


def _current_budget(env_runner) -> float | None:
    """The one-team deployment budget (``None`` without a budget or with several teams)."""
    from marllib_ext.algos.efx import budget_connector

    connector = budget_connector(env_runner)
    if connector is None or len(connector.controllers) != 1:
        return None
    return connector.budget


def _run_episodes(env_runner, num_episodes, explore):
    episodes = env_runner.sample(num_episodes=num_episodes, explore=explore, force_reset=True)
    team, agents = [], {}
    for episode in episodes:
        if hasattr(episode, "agent_episodes"):
            team.append(float(episode.get_return()))
            for agent_id, agent_episode in episode.agent_episodes.items():
                agents.setdefault(agent_id, []).append(float(agent_episode.get_return()))
        else:
            team.append(float(episode.get_return()))
            agents.setdefault("agent", []).append(team[-1])
    return team, agents


FRAMES_ATTRIBUTE = "_marllib_ext_frames"


def record_frame(*, env_runner, env, env_index, **kwargs) -> None:
    """``on_episode_start`` / ``on_episode_step``: keeps the sub-env's rendered frame."""
    sub_env = env.envs[env_index]
    sub_env = getattr(sub_env, "unwrapped", sub_env)
    frame = sub_env.par_env.render() if hasattr(sub_env, "par_env") else sub_env.render()
    if frame is not None:
        frames = getattr(env_runner, FRAMES_ATTRIBUTE, None)
        if frames is None:
            frames = []
            setattr(env_runner, FRAMES_ATTRIBUTE, frames)
        frames.append(np.asarray(frame, dtype=np.uint8))


def save_frames(frames: list[np.ndarray], out: Path) -> list[Path]:
    """Writes ``frame_<k>.png`` files (pygame, which mpe2 already needs) into ``out``."""
    import os

    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import pygame

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, frame in enumerate(frames):
        path = out / f"frame_{index:05d}.png"
        # pygame surfaces are (width, height, 3).
        pygame.image.save(pygame.surfarray.make_surface(frame.swapaxes(0, 1)), str(path))
        paths.append(path)
    return paths


def _check_checkpoint(checkpoint: str | Path, episodes: int) -> Path:
    path = Path(checkpoint)
    if not path.exists():
        raise ConfigError(f"checkpoint {str(path)!r} does not exist")
    if episodes < 1:
        raise ConfigError(f"episodes must be >= 1, got {episodes}")
    return path


def register_checkpoint_env(path: Path) -> None:
    """Registers with RLlib the env a checkpoint names by our registry id: every
    registered env, and a by-name family's env (``vmas:navigation``, ``magent:...``)
    that this process has not built yet."""
    for name in list_envs():
        EnvHandle(name).register_with_rllib()
    ctor_file = path / "class_and_ctor_args.pkl"
    if not ctor_file.exists():
        return
    with open(ctor_file, "rb") as f:
        args, _ = pickle.load(f)["ctor_args_and_kwargs"]
    env_id = args[0].get("env") if args and isinstance(args[0], dict) else None
    handle = EnvHandle.from_rllib_env_id(env_id) if isinstance(env_id, str) else None
    if handle is not None and handle.name not in list_envs():
        handle.register_with_rllib()


@contextlib.contextmanager
def restored_algorithm(path: Path, *, render: str | None = None):
    """The checkpoint's algorithm rebuilt with one local env runner (a single env when
    rendering) and restored; stopped on exit."""
    from ray.rllib.algorithms.algorithm import Algorithm

    register_checkpoint_env(path)
    trained = Algorithm.from_checkpoint(str(path.resolve()))
    config = trained.config.copy(copy_frozen=False)
    trained.stop()
    # Episodes only, no training: the fragment length need not divide the train batch.
    config.env_runners(
        num_env_runners=0,
        num_envs_per_env_runner=1 if render else 4,
        rollout_fragment_length="auto",
    )
    if render is not None:
        config.environment(env_config={**config.env_config, "render_mode": render})
        config.callbacks(on_episode_start=record_frame, on_episode_step=record_frame)
    algorithm = config.build_algo()
    try:
        algorithm.restore_from_path(str(path.resolve()))
        yield algorithm
    finally:
        algorithm.stop()


def _checked_budget_range(runner, flag: str) -> tuple[float, float]:
    budget_range = _budget_range(runner)
    if budget_range is None:
        raise ConfigError(f"{flag} needs a checkpoint of an EFX algorithm (efx_mappo)")
    return budget_range


def evaluate(
    checkpoint: str | Path,
    *,
    episodes: int = 10,
    z: float | None = None,
    explore: bool = True,
    render: str | None = None,
    out: str | Path | None = None,
) -> EvaluationResult:
    """Loads ``checkpoint`` and runs ``episodes`` episodes without training.

    ``z``: for EFX algorithms, every episode starts at this fixed budget (within the
    trained ``[z_low, z_high]``); without it, at the controller's deployment budget.
    ``explore=True`` samples actions as in training, which
    also makes z evolve as in training (RLlib logs ``logp = 0`` when not exploring).
    ``render="rgb_array"`` renders every step of one env (PettingZoo ``render_mode``)
    and writes the frames as PNG files into ``out``.
    """
    path = _check_checkpoint(checkpoint, episodes)
    if render not in (None, "rgb_array"):
        raise ConfigError(f"--render supports 'rgb_array' only, got {render!r}")
    if render is not None and out is None:
        raise ConfigError("--render needs --out DIR for the frames")
    with restored_algorithm(path, render=render) as algorithm:
        runner = algorithm.env_runner
        if _has_budget(runner):  # EFX: play the chosen or the deployment budget(s)
            if z is not None:
                low, high = _budget_range(runner)
                if not low <= z <= high:
                    raise ConfigError(
                        f"--z {z} is outside the trained budget range [{low}, {high}]"
                    )
            _set_fixed_budget(runner, z)
        elif z is not None:
            _checked_budget_range(runner, "--z")
        budget = _current_budget(runner)
        team, agents = _run_episodes(runner, episodes, explore)
        frames = getattr(runner, FRAMES_ATTRIBUTE, [])
    if render is not None:
        save_frames(frames, Path(out))
    return EvaluationResult(team[:episodes], agents, budget, n_frames=len(frames))


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
    from marllib_ext.algos.efx import episode_team_logp

    if z is not None:
        _set_fixed_budget(runner, z)
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
        intrinsic_return=float(np.mean([-coef * episode_team_logp([e]) for e in played])),
        success_rate=float(np.mean(successes)) if successes else None,
        episodes=len(played),
    )


def _intrinsic_coef(algorithm) -> float:
    return float(settings_of(algorithm.config).intrinsic_coef)


def sweep_budgets(checkpoint: str | Path, *, points: int, episodes: int = 10) -> list[BudgetPoint]:
    """``points`` budgets evenly spread over the trained ``[floor, z_high]`` (``floor =
    z_low`` unless the run tracked it), each played for ``episodes`` episodes with
    sampled actions (as in training)."""
    path = _check_checkpoint(checkpoint, episodes)
    if points < 2:
        raise ConfigError(f"--z-sweep needs at least 2 budgets, got {points}")
    with restored_algorithm(path) as algorithm:
        runner = algorithm.env_runner
        _, high = _checked_budget_range(runner, "--z-sweep")
        floor = _budget_floor(runner)
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
    from marllib_ext.ops.efx import largest_budget_within

    path = _check_checkpoint(checkpoint, episodes)
    if tolerance is not None and tolerance < 0:
        raise ConfigError(f"--tolerance must be >= 0, got {tolerance}")
    with restored_algorithm(path) as algorithm:
        runner = algorithm.env_runner
        low, high = _checked_budget_range(runner, "--z auto")
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
            z_low=_budget_floor(runner),
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
    figure.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)
    plt.close(figure)
    return out
