"""Run a trained team from a checkpoint without training, optionally at a chosen budget z."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from marllib_ext.envs.handle import EnvHandle
from marllib_ext.envs.registry import list_envs
from marllib_ext.errors import ConfigError


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


def _budget_range(env_runner):
    from marllib_ext.algos.efx import budget_connector

    connector = budget_connector(env_runner)
    return None if connector is None else (connector.controller.z_low, connector.controller.z_high)


def _set_fixed_budget(env_runner, z):
    from marllib_ext.algos.efx import budget_connector

    connector = budget_connector(env_runner)
    if connector is not None:
        connector.play_fixed(float(z))


def _current_budget(env_runner):
    from marllib_ext.algos.efx import budget_connector

    connector = budget_connector(env_runner)
    return None if connector is None else connector.controller.z


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
    trained ``[z_low, z_high]``). ``explore=True`` samples actions as in training, which
    also makes z evolve as in training (RLlib logs ``logp = 0`` when not exploring).
    ``render="rgb_array"`` renders every step of one env (PettingZoo ``render_mode``)
    and writes the frames as PNG files into ``out``.
    """
    from ray.rllib.algorithms.algorithm import Algorithm

    path = Path(checkpoint)
    if not path.exists():
        raise ConfigError(f"checkpoint {str(path)!r} does not exist")
    if episodes < 1:
        raise ConfigError(f"episodes must be >= 1, got {episodes}")
    if render not in (None, "rgb_array"):
        raise ConfigError(f"--render supports 'rgb_array' only, got {render!r}")
    if render is not None and out is None:
        raise ConfigError("--render needs --out DIR for the frames")
    for name in list_envs():  # the checkpoint names its env by our registry id
        EnvHandle(name).register_with_rllib()
    trained = Algorithm.from_checkpoint(str(path.resolve()))
    config = trained.config.copy(copy_frozen=False)
    trained.stop()
    # One local env runner (a single env when rendering) with the trained state.
    config.env_runners(num_env_runners=0, num_envs_per_env_runner=1 if render else 4)
    if render is not None:
        config.environment(env_config={**config.env_config, "render_mode": render})
        config.callbacks(on_episode_start=record_frame, on_episode_step=record_frame)
    algorithm = config.build_algo()
    try:
        algorithm.restore_from_path(str(path.resolve()))
        runner = algorithm.env_runner
        if z is not None:
            budget_range = _budget_range(runner)
            if budget_range is None:
                raise ConfigError("--z needs a checkpoint of an EFX algorithm (efx_mappo)")
            low, high = budget_range
            if not low <= z <= high:
                raise ConfigError(f"--z {z} is outside the trained budget range [{low}, {high}]")
            _set_fixed_budget(runner, float(z))
        budget = _current_budget(runner)
        team, agents = _run_episodes(runner, episodes, explore)
        frames = getattr(runner, FRAMES_ATTRIBUTE, [])
    finally:
        algorithm.stop()
    if render is not None:
        save_frames(frames, Path(out))
    return EvaluationResult(team[:episodes], agents, budget, n_frames=len(frames))
