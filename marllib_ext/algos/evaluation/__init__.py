"""``evaluate``: a checkpoint's returns over complete episodes, without training (EFX's
budget sweep and choice: :mod:`marllib_ext.algos.efx.deployment`); and evaluation
during training.

Evaluation during training on RLlib's evaluation machinery, and its records in
marl-eval's JSON layout.

Every ``evaluation_interval`` iterations RLlib's ``Algorithm.evaluate`` runs
``evaluation_duration`` episodes on its own evaluation env runner (separate from the
training runners: no training sample is consumed), one world at a time so that short
episodes are not favoured, greedily unless ``evaluation_explore``. Each episode's team
return and, where the env reports it, its success (a SMAX win) are kept per episode
(``record_evaluation_episode``); the result's ``evaluation`` section then goes to
``progress.csv`` (``eval_*`` columns), TensorBoard, W&B and MLflow with the rest.

``MarlEvalRecord`` writes a run's evaluations as marl-eval reads them (InstaDeep's
``marl_eval``, BenchMARL's ``metrics.json``)::

    {env: {task: {algorithm: {"seed_N": {
        "step_k": {"step_count": env steps, "elapsed_time": s, "return": [...],
                   "win_rate": [...]},
        "absolute_metrics": {"return": [...], "win_rate": [...]}}}}}}

one value per evaluation episode; ``absolute_metrics``: the best evaluation's policy
re-evaluated with ten times the episodes."""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from marllib_ext.algos.efx.deployment import play_at_budget
from marllib_ext.algos.env_checks import with_episode_end_callback
from marllib_ext.algos.restore import (
    FRAMES_ATTRIBUTE,
    check_checkpoint,
    evaluation_env_config,
    restored_algorithm,
    save_frames,
    save_video,
)
from marllib_ext.envs.adapter import SUCCESS_KEY
from marllib_ext.errors import ConfigError
from marllib_ext.report import run_steps, single_run
from marllib_ext.rllib_compat.checkpoints import save_policy_snapshot
from marllib_ext.rollout.direct import needs_no_episode_objects
from marllib_ext.rollout.episode_steps import episode_coverage


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


def run_episodes(env_runner, num_episodes, explore, coverage: list | None = None):
    """``(team returns, {agent: returns}, successes)`` of ``num_episodes`` episodes;
    each one's ``episode_coverage`` is appended to ``coverage`` where given."""
    episodes = env_runner.sample(num_episodes=num_episodes, explore=explore, force_reset=True)
    team, agents, successes = [], {}, []
    for episode in episodes:
        if (success := episode_success(episode)) is not None:
            successes.append(success)
        if coverage is not None and (visited := episode_coverage(episode)) is not None:
            coverage.append(visited)
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


# ---- evaluation during training -------------------------------------------------------
EVALUATION = "evaluation"  # RLlib's result key
RETURNS = "eval_episode_returns"  # per-episode series in the evaluation runner's metrics
SUCCESSES = "eval_episode_successes"
COVERAGE = "eval_episode_coverage"  # distinct global states visited per episode
METRICS_FILE = "metrics.json"  # marl-eval's (and BenchMARL's) file name
BEST_CHECKPOINT = "checkpoint_best"  # the run's best evaluation so far
BUDGET_POINTS_FILE = "budget_points.json"  # EFX's episodes per budget fraction
# progress.csv columns (NaN in iterations without an evaluation)
PROGRESS_COLUMNS = ("eval_return_mean", "eval_success_rate", "eval_coverage_mean", "eval_episodes")


def with_evaluation(config: AlgorithmConfig, settings: Any) -> AlgorithmConfig:
    """``config`` evaluating every ``settings.evaluation_interval`` iterations (``None``:
    never) for ``evaluation_duration`` episodes on a separate local env runner."""
    interval = getattr(settings, "evaluation_interval", None)
    if not interval:
        return config
    duration = int(settings.evaluation_duration)
    env_config = evaluation_env_config(config)
    config.evaluation(
        evaluation_interval=int(interval),
        evaluation_duration=duration,
        evaluation_duration_unit="episodes",
        evaluation_num_env_runners=0,
        evaluation_config=AlgorithmConfig.overrides(
            explore=bool(settings.evaluation_explore),
            # One world: the first episodes to end would be the short ones.
            num_envs_per_env_runner=1,
            metrics_num_episodes_for_smoothing=duration,
            **({} if env_config is None else {"env_config": env_config}),
        ),
    )
    return with_episode_end_callback(config, record_evaluation_episode)


@needs_no_episode_objects  # it records evaluation episodes only, never training ones
def record_evaluation_episode(*, episode, env_runner=None, metrics_logger=None, **kwargs):
    """``on_episode_end`` of the evaluation runner: the episode's team return, success
    and coverage, each as one item of a per-evaluation series."""
    if env_runner is None or metrics_logger is None or not env_runner.config.in_evaluation:
        return
    metrics_logger.log_value(RETURNS, float(episode.get_return()), reduce="item_series")
    success = episode_success(episode)
    if success is not None:
        metrics_logger.log_value(SUCCESSES, float(success), reduce="item_series")
    coverage = episode_coverage(episode)
    if coverage is not None:
        metrics_logger.log_value(COVERAGE, float(coverage), reduce="item_series")


class EvaluationEpisodes:
    """The evaluations in a run's results. RLlib evaluates at the iterations that
    ``evaluation_interval`` divides and keeps the last evaluation's section in the
    results of the iterations between (its lifetime episode count does not grow
    either), so an iteration's own evaluation is read at those iterations only."""

    def __init__(self, interval: int | None) -> None:
        self.interval = interval

    def new(self, result: dict[str, Any]) -> dict[str, list[float]] | None:
        """``{"return": [...], "win_rate": [...]}`` of the evaluation this iteration ran
        (one value per episode; ``win_rate`` only where the env reports success),
        ``None`` where it ran none."""
        iteration = int(result.get("training_iteration", 0))
        if not self.interval or iteration % self.interval:
            return None
        return evaluated_episodes((result.get(EVALUATION) or {}).get("env_runners") or {})


def evaluated_episodes(runners: dict[str, Any]) -> dict[str, list[float]] | None:
    """``{"return": [...], "win_rate": [...]}`` from an evaluation's ``env_runners``
    results (``None`` where it recorded no episode)."""
    returns = runners.get(RETURNS)
    if returns is None or len(returns) == 0:
        return None
    out = {"return": [float(v) for v in returns]}
    successes = runners.get(SUCCESSES)
    if successes is not None and len(successes) > 0:
        out["win_rate"] = [float(v) for v in successes]
    coverage = runners.get(COVERAGE)
    if coverage is not None and len(coverage) > 0:
        out["coverage"] = [float(v) for v in coverage]
    return out


def evaluation_at_budget(algorithm) -> dict[str, list[float]] | None:
    """One more evaluation after the last iteration where that iteration ran none, so
    every evaluated run ends with its final policy's evaluation at the budget
    (``{"return": [...], "win_rate": [...]}`` as :meth:`EvaluationEpisodes.new`)."""
    return evaluated_episodes(algorithm.evaluate().get("env_runners") or {})


def progress_values(episodes: dict[str, list[float]] | None) -> dict[str, float]:
    """The ``eval_*`` progress columns of one evaluation (NaN without one)."""
    if episodes is None:
        return dict.fromkeys(PROGRESS_COLUMNS, math.nan)
    wins, coverage = episodes.get("win_rate"), episodes.get("coverage")
    return {
        "eval_return_mean": float(np.mean(episodes["return"])),
        "eval_success_rate": float(np.mean(wins)) if wins else math.nan,
        "eval_coverage_mean": float(np.mean(coverage)) if coverage else math.nan,
        "eval_episodes": float(len(episodes["return"])),
    }


class MarlEvalRecord:
    """One run's evaluations in marl-eval's layout, rewritten whole to
    ``run_dir/metrics.json`` after each one (a crash keeps every evaluation done)."""

    def __init__(self, run_dir: Path, *, env: str, task: str, algorithm: str, seed: int | None):
        self.path = Path(run_dir) / METRICS_FILE
        self.run: dict[str, Any] = {"absolute_metrics": {}}
        self.data = {env: {task: {algorithm: {f"seed_{seed or 0}": self.run}}}}
        self.started = time.perf_counter()
        self.steps = 0
        self.best: tuple[float, int] | None = None  # (mean return, step index)

    def add(self, step_count: int, episodes: dict[str, list[float]]) -> bool:
        """Records one evaluation; ``True`` where its mean return is the best so far."""
        index = self.steps
        self.run[f"step_{index}"] = {
            "step_count": int(step_count),
            "elapsed_time": time.perf_counter() - self.started,
            **episodes,
        }
        self.steps += 1
        self._write()
        mean = float(np.mean(episodes["return"]))
        if self.best is None or mean > self.best[0]:
            self.best = (mean, index)
            return True
        return False

    def continue_from(self, step_count: int) -> None:
        """Takes up the evaluations an interrupted run recorded up to ``step_count`` env
        steps (those its restored checkpoint had reached). Where the best of them came
        later, the best so far is unknown (its snapshot is of a policy not restored) and
        the next evaluation sets it."""
        if not self.path.exists():
            return
        data = json.loads(self.path.read_text())
        run = single_run(data)
        kept = [entry for entry in run_steps(run) if entry["step_count"] <= step_count]
        best_mean = max((float(np.mean(e["return"])) for e in run_steps(run)), default=None)
        for index, entry in enumerate(kept):
            self.run[f"step_{index}"] = entry
            mean = float(np.mean(entry["return"]))
            if self.best is None or mean > self.best[0]:
                self.best = (mean, index)
        if self.best is not None and best_mean is not None and self.best[0] < best_mean:
            self.best = None
        self.steps = len(kept)
        if kept:
            self.started -= float(kept[-1].get("elapsed_time", 0.0))
        self._write()

    def set_budget_points(self, points: dict[str, dict] | None) -> None:
        """EFX's episodes per budget fraction, beside ``metrics.json`` (whose layout
        marl-eval reads stays its own)."""
        if points is not None:
            (self.path.parent / BUDGET_POINTS_FILE).write_text(json.dumps(points, indent=1))

    def set_absolute(self, episodes: dict[str, list[float]] | None) -> None:
        if episodes is None:  # no end-of-run re-evaluation
            return
        self.run["absolute_metrics"] = dict(episodes)
        self._write()

    def _write(self) -> None:
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(self.data, indent=1))
        os.replace(partial, self.path)


VIDEOS_DIR = "videos"
VIDEO_CHECKPOINT = "checkpoint_video"  # the policy being rendered; removed after


class EvaluationVideos:
    """Every ``evaluation_video_interval``-th evaluation of a run renders one episode of
    the current policy to ``videos/step_<env steps>.gif`` (greedy unless
    ``evaluation_explore``; EFX at its evaluation budget), through ``evaluate --video``
    on a checkpoint of the moment. A family that cannot render turns the videos off
    with a warning; training goes on."""

    def __init__(self, run_dir: Path, settings: Any) -> None:
        self.run_dir = run_dir
        self.interval = getattr(settings, "evaluation_video_interval", None)
        self.explore = bool(getattr(settings, "evaluation_explore", False))
        self.budget = getattr(settings, "evaluation_budget", None)
        self.evaluations = 0

    def after_evaluation(self, algorithm, env_steps: int) -> Path | None:
        """The video of this evaluation, if one is due (else ``None``)."""
        if not self.interval:
            return None
        self.evaluations += 1
        if self.evaluations % self.interval:
            return None
        checkpoint = (self.run_dir / VIDEO_CHECKPOINT).resolve()
        save_policy_snapshot(algorithm, checkpoint)
        path = self.run_dir / VIDEOS_DIR / f"step_{env_steps}.gif"
        try:
            evaluate(checkpoint, episodes=1, explore=self.explore, z=self.budget, video=path)
        except ConfigError as error:
            warnings.warn(f"evaluation videos are off for this run: {error}", stacklevel=2)
            self.interval = None
            return None
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
        return path


def env_and_task(env_name: str) -> tuple[str, str]:
    """marl-eval's environment and task of a registered env name (``smax:3m`` ->
    ``("smax", "3m")``; a gymnasium id is its own task)."""
    family, _, task = env_name.partition(":")
    return (family, task) if task else ("gymnasium", family)
