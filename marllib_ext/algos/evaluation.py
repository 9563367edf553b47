"""``evaluate``: a checkpoint's returns over complete episodes, without training (EFX's
budget sweep and choice: :mod:`marllib_ext.algos.efx.deployment`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from marllib_ext.algos.efx.deployment import play_at_budget
from marllib_ext.algos.restore import (
    FRAMES_ATTRIBUTE,
    check_checkpoint,
    restored_algorithm,
    save_frames,
    save_video,
)
from marllib_ext.envs.adapter import SUCCESS_KEY
from marllib_ext.errors import ConfigError


@dataclass(frozen=True)
class EvaluationResult:
    """Returns of ``episodes`` complete episodes."""

    team_returns: list[float]
    agent_returns: dict[str, list[float]]
    budget_z: float | None
    n_frames: int = 0
    # Episodes whose last step reports info["success"] (a SMAX win, grid:pass solved);
    # empty where the env reports none.
    successes: list[bool] = field(default_factory=list)

    @property
    def success_rate(self) -> float | None:
        return float(np.mean(self.successes)) if self.successes else None

    @property
    def team_return_mean(self) -> float:
        return float(np.mean(self.team_returns))

    @property
    def agent_return_mean(self) -> float:
        return float(np.mean([np.mean(v) for v in self.agent_returns.values()]))


def episode_success(episode) -> bool | None:
    """``info["success"]`` of the episode's last step (any agent), ``None`` if absent."""
    last = episode.get_infos(-1)
    infos = last.values() if hasattr(episode, "agent_episodes") else [last]
    reports = [info[SUCCESS_KEY] for info in infos if SUCCESS_KEY in (info or {})]
    return any(reports) if reports else None


def run_episodes(env_runner, num_episodes, explore):
    episodes = env_runner.sample(num_episodes=num_episodes, explore=explore, force_reset=True)
    team, agents, successes = [], {}, []
    for episode in episodes:
        if (success := episode_success(episode)) is not None:
            successes.append(success)
        if hasattr(episode, "agent_episodes"):
            team.append(float(episode.get_return()))
            for agent_id, agent_episode in episode.agent_episodes.items():
                agents.setdefault(agent_id, []).append(float(agent_episode.get_return()))
        else:
            team.append(float(episode.get_return()))
            agents.setdefault("agent", []).append(team[-1])
    return team, agents, successes


def evaluate(
    checkpoint: str | Path,
    *,
    episodes: int = 10,
    z: float | None = None,
    explore: bool = True,
    render: str | None = None,
    out: str | Path | None = None,
    video: str | Path | None = None,
) -> EvaluationResult:
    """Loads ``checkpoint`` and runs ``episodes`` episodes without training.

    ``z``: for EFX algorithms, every episode starts at this fixed budget (within the
    trained ``[z_low, z_high]``); without it, at the controller's deployment budget.
    ``explore=True`` samples actions as in training, which
    also makes z evolve as in training (RLlib logs ``logp = 0`` when not exploring).
    ``render="rgb_array"`` renders every step of one env (PettingZoo ``render_mode``)
    and writes the frames as PNG files into ``out``.
    """
    path = check_checkpoint(checkpoint, episodes)
    if video is not None:
        if Path(video).suffix.lower() != ".gif":
            raise ConfigError(f"--video writes a GIF: a path ending in .gif, got {str(video)!r}")
        render = "rgb_array"
    if render not in (None, "rgb_array"):
        raise ConfigError(f"--render supports 'rgb_array' only, got {render!r}")
    if render is not None and out is None and video is None:
        raise ConfigError("--render needs --out DIR for the frames")
    with restored_algorithm(path, render=render) as algorithm:
        runner = algorithm.env_runner
        budget = play_at_budget(runner, z)  # EFX: the chosen or the deployment budget(s)
        team, agents, successes = run_episodes(runner, episodes, explore)
        frames = getattr(runner, FRAMES_ATTRIBUTE, [])
        env_name = algorithm.config.env
    if render is not None and not frames:
        raise ConfigError(f"env {env_name!r} rendered no frames: its family cannot render yet")
    if video is not None:
        save_video(frames, Path(video))
    if out is not None and render is not None:
        save_frames(frames, Path(out))
    return EvaluationResult(
        team[:episodes], agents, budget, n_frames=len(frames), successes=successes[:episodes]
    )
