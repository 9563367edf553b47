"""MARLlib-style Python API: ``algos.mappo(hyperparam_source="mpe").fit(env, ...)``."""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from marllib_ext.algos.env_checks import raise_on_env_errors, with_episode_end_callback  # noqa: F401
from marllib_ext.algos.evaluation import (
    BEST_CHECKPOINT,
    EvaluationEpisodes,
    EvaluationVideos,
    MarlEvalRecord,
    env_and_task,
    evaluation_at_budget,
)
from marllib_ext.algos.evaluation import PROGRESS_COLUMNS as EVAL_PROGRESS_COLUMNS
from marllib_ext.algos.evaluation import progress_values as eval_progress_values
from marllib_ext.algos.evaluation.final import record_final_evaluations
from marllib_ext.algos.policy_sharing import default_share_policy
from marllib_ext.algos.registry import AlgoSpec, get_algo_spec, progress_columns
from marllib_ext.algos.tracking import (
    Trackers,
    check_wandb_credentials,
    continued_progress,
    new_run_dir,
    require_mlflow,
    save_checkpoint,
    tensorboard_gif,
    tensorboard_writer,
    write_scalars,
)
from marllib_ext.configs.run_file import (
    RESUMABLE_CHANGES,
    RunSpec,
    settings_record,
    write_run_config,
)
from marllib_ext.envs.handle import EnvHandle, make_env
from marllib_ext.errors import ConfigError, EnvError
from marllib_ext.rllib_compat import settings_of
from marllib_ext.rllib_compat.checkpoints import save_policy_snapshot
from marllib_ext.rllib_compat.cluster import check_cluster_resources, ray_address
from marllib_ext.rllib_compat.env_runners import EPISODE_SUCCESS
from marllib_ext.rollout.sampler import AUTO, with_sampler

RESUMES_FILE = "resumes.txt"  # a continued run directory: one line per resume
# stop key -> (where in the progress row, what it means)
STOP_KEYS = {
    "training_iteration": "iterations done",
    "timesteps_total": "env steps sampled",
    "episode_return_mean": "mean team episode return reached",
    "time_total_s": "wall-clock seconds",
}
BASE_PROGRESS_FIELDS = (
    "training_iteration",
    "timesteps_total",
    "episode_return_mean",
    "agent_return_mean",
    "episodes_total",
    "success_rate",  # training episodes' info["success"] (batched rollouts), else NaN
    "time_this_iter_s",
    "time_total_s",
    "env_runners_healthy",  # remote env runners alive after the iteration
    "env_runners",  # remote env runners configured
    *EVAL_PROGRESS_COLUMNS,  # the iteration's evaluation (evaluation_interval), else NaN
)
# The same columns for every algorithm (NaN where an algorithm has no such value), so
# progress files of different algorithms line up.
PROGRESS_FIELDS = BASE_PROGRESS_FIELDS + tuple(c.name for c in progress_columns())


@dataclass
class FitResult:
    """What ``Algo.fit`` returns."""

    run_dir: Path
    checkpoint_path: Path | None
    progress: list[dict[str, float]] = field(default_factory=list)
    last_result: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> dict[str, float]:
        return self.progress[-1] if self.progress else {}


def progress_row(result: Mapping[str, Any], spec: AlgoSpec | None = None) -> dict[str, float]:
    """The few numbers printed and logged per iteration, from an RLlib result dict;
    ``spec.progress`` adds the algorithm's own columns (NaN for the others')."""
    runners = result.get("env_runners", {})
    agent_returns = runners.get("agent_episode_returns_mean") or {}
    if agent_returns:
        agent_mean = sum(agent_returns.values()) / len(agent_returns)
    else:  # single-agent env: the agent's return is the episode return
        agent_mean = runners.get("episode_return_mean", math.nan)
    row = {
        "training_iteration": int(result.get("training_iteration", 0)),
        "timesteps_total": int(runners.get("num_env_steps_sampled_lifetime", 0)),
        "episode_return_mean": float(runners.get("episode_return_mean", math.nan)),
        "agent_return_mean": float(agent_mean),
        "episodes_total": int(runners.get("num_episodes_lifetime", 0)),
        "success_rate": float(runners.get(EPISODE_SUCCESS, math.nan)),
        "time_this_iter_s": float(result.get("time_this_iter_s", math.nan)),
        "time_total_s": float(result.get("time_total_s", math.nan)),
        "env_runners_healthy": math.nan,
        "env_runners": math.nan,
        **eval_progress_values(None),  # Algo.fit fills in its evaluations
    }
    row.update(dict.fromkeys(PROGRESS_FIELDS[len(BASE_PROGRESS_FIELDS) :], math.nan))
    if spec is not None:
        row.update(spec.progress(result))
    return row


def check_stop(stop: Mapping[str, float]) -> dict[str, float]:
    for key, value in stop.items():
        if key not in STOP_KEYS:
            raise ConfigError(f"unknown stop key {key!r}; allowed: {', '.join(STOP_KEYS)}")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ConfigError(f"stop key {key!r} must be a number, got {value!r}")
    if not stop:
        raise ConfigError("stop needs at least one of " + ", ".join(STOP_KEYS))
    return dict(stop)


def should_stop(row: Mapping[str, float], stop: Mapping[str, float]) -> bool:
    return any(row[key] >= threshold for key, threshold in stop.items() if row[key] == row[key])


class Algo:
    """A registered algorithm with its hyperparameter source and overrides."""

    def __init__(self, name: str, hyperparam_source: str | None = None, **overrides: Any) -> None:
        self.spec: AlgoSpec = get_algo_spec(name)
        self.name = name
        self.hyperparam_source = hyperparam_source
        self.overrides = dict(overrides)

    def __repr__(self) -> str:
        return f"Algo({self.name!r}, hyperparam_source={self.hyperparam_source!r})"

    @staticmethod
    def _env(env: EnvHandle | str) -> EnvHandle:
        return make_env(env) if isinstance(env, str) else env

    def settings(self, env: EnvHandle | str, **overrides: Any) -> Any:
        """The validated typed settings for ``env``."""
        env = self._env(env)
        source = self.hyperparam_source or env.hyperparam_source
        return self.spec.settings(source, {**self.overrides, **overrides})

    def share_policy(self, env: EnvHandle | str, share_policy: str | None = None) -> str:
        """``share_policy``, or where ``None`` what the env and algorithm allow
        (:func:`default_share_policy`)."""
        return share_policy or default_share_policy(self.spec, self._env(env))

    def rllib_config(
        self,
        env: EnvHandle | str,
        *,
        share_policy: str | None = None,
        seed: int | None = None,
        sampler: str = AUTO,
        **overrides: Any,
    ) -> AlgorithmConfig:
        """The plain RLlib ``AlgorithmConfig`` (``build_algo()``, Tune); ``share_policy=None``:
        what the env and algorithm allow; ``sampler``: one of ``rollout.sampler.SAMPLERS``."""
        env = self._env(env)
        self.spec.check_env(env)
        settings = self.settings(env, **overrides)
        config = self.spec.rllib_config(settings, env, self.share_policy(env, share_policy), seed)
        return with_sampler(config, sampler)

    def run_spec(
        self,
        env: EnvHandle | str,
        *,
        share_policy: str | None = None,
        seed: int | None = None,
        stop: Mapping[str, float] | None = None,
        **overrides: Any,
    ) -> RunSpec:
        """The run as data (``config.yaml``), resolved: source, sharing and every
        setting filled in."""
        env = self._env(env)
        given = {**self.overrides, **overrides}
        return RunSpec(
            algo=self.name,
            env=env.name,
            source=self.hyperparam_source or env.hyperparam_source,
            set={k: v for k, v in given.items() if k not in RESUMABLE_CHANGES},
            env_args=dict(env.env_args),
            share_policy=self.share_policy(env, share_policy),
            seed=seed,
            stop=dict(stop or {}),
            evaluation={k: v for k, v in given.items() if k in RESUMABLE_CHANGES},
            settings=settings_record(self.settings(env, **overrides)),
        )

    def fit(
        self,
        env: EnvHandle | str,
        *,
        stop: Mapping[str, float],
        share_policy: str | None = None,
        seed: int | None = None,
        local_dir: str | Path = "runs",
        checkpoint_end: bool = True,
        checkpoint_freq: int = 0,
        resume_from: str | Path | None = None,
        tensorboard: bool = True,
        wandb: str | None = None,
        mlflow: str | bool | None = None,
        on_iteration: Callable[[dict[str, float]], None] | None = None,
        on_start: Callable[[Any], None] | None = None,
        run_dir: str | Path | None = None,
        on_result: Callable[[dict[str, float], Path | None], None] | None = None,
        label: str | None = None,
        task_label: str | None = None,
        **overrides: Any,
    ) -> FitResult:
        """Trains until any ``stop`` criterion is reached; saves checkpoints.

        ``stop`` keys: ``training_iteration``, ``timesteps_total``,
        ``episode_return_mean``, ``time_total_s``. Each call writes a fresh run
        directory: ``progress.csv`` (one row per iteration, also passed to
        ``on_iteration``), TensorBoard event files under ``tb/`` with every numeric
        result entry (the algorithm's custom metrics included), a checkpoint every
        ``checkpoint_freq`` iterations (``checkpoint_<iteration>``) and one at the end
        (``checkpoint``). ``wandb="PROJECT"`` and ``mlflow=True`` (a store under the
        run directory) or ``mlflow="URI"`` also log every iteration's numbers, the
        config and the final checkpoint path there (``algos.tracking``).
        ``resume_from`` restores a checkpoint of the same algorithm
        first: iteration count, env-step counters, weights, optimizer states and
        connector states (EFX's budget) continue from there. ``on_start`` gets the
        built RLlib ``Algorithm`` before the first iteration.

        ``run_dir``: this directory instead of a fresh one; with ``resume_from`` its
        files continue from the checkpoint's iteration (``resumes.txt`` says where).
        ``config.yaml`` in the run directory and every checkpoint is the resolved run.
        ``on_result(row, checkpoint)``: once per iteration, with that iteration's
        periodic checkpoint or ``None``. ``label`` / ``task_label``: the names in
        ``metrics.json`` (default: the algorithm's and the env's).
        """
        import ray

        env = self._env(env)
        stop = check_stop(stop)
        if checkpoint_freq < 0:
            raise ConfigError(f"checkpoint_freq must be >= 0, got {checkpoint_freq}")
        if resume_from is not None and not Path(resume_from).exists():
            raise ConfigError(f"resume checkpoint {str(resume_from)!r} does not exist")
        share_policy = self.share_policy(env, share_policy)
        config = self.rllib_config(env, share_policy=share_policy, seed=seed, **overrides)
        run = self.run_spec(env, share_policy=share_policy, seed=seed, stop=stop, **overrides)
        mlflow_uri = mlflow_store(mlflow)
        if wandb:
            check_wandb_credentials()
        if mlflow_uri is not None:
            require_mlflow()
        if not ray.is_initialized():
            ray.init(address=ray_address(), include_dashboard=False, configure_logging=False)
        check_cluster_resources(config)
        continuing = run_dir is not None and resume_from is not None
        if run_dir is None:
            run_dir = new_run_dir(Path(local_dir), f"{self.name}_{env.name.replace(':', '-')}")
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        write_run_config(run_dir, run)
        algorithm = config.build_algo()
        fit_result = FitResult(run_dir=run_dir, checkpoint_path=None)
        writer = tensorboard_writer(run_dir) if tensorboard else None
        trackers = Trackers.start(
            run_dir,
            self.run_config(config, env, share_policy=share_policy, seed=seed),
            wandb_project=wandb,
            mlflow_uri=mlflow_uri,
        )
        settings = settings_of(config)
        family, task = env_and_task(env.name)
        record = MarlEvalRecord(
            run_dir,
            env=family,
            task=task_label or task,
            algorithm=label or self.name,
            seed=seed,
        )
        progress_mode, kept_rows = "w", []
        evaluations = EvaluationEpisodes(settings.evaluation_interval)
        videos = EvaluationVideos(run_dir, settings)
        failed = True
        try:
            if resume_from is not None:
                algorithm.restore_from_path(str(Path(resume_from).resolve()))
            if continuing:
                kept_rows = continued_progress(run_dir, algorithm.iteration, PROGRESS_FIELDS)
                steps = kept_rows[-1]["timesteps_total"] if kept_rows else 0
                record.continue_from(steps)
                progress_mode = "a"
                with open(run_dir / RESUMES_FILE, "a") as log:
                    log.write(f"iteration {algorithm.iteration} env_steps {steps}\n")
            if on_start is not None:
                on_start(algorithm)
            with open(run_dir / "progress.csv", progress_mode, newline="") as f:
                progress = csv.DictWriter(f, fieldnames=PROGRESS_FIELDS)
                if progress_mode == "w":
                    progress.writeheader()
                while True:
                    result = algorithm.train()
                    raise_on_env_errors(result, env)
                    row = progress_row(result, self.spec)
                    evaluated = evaluations.new(result)
                    row.update(eval_progress_values(evaluated))
                    runners = algorithm.env_runner_group
                    row["env_runners_healthy"] = runners.num_healthy_remote_workers()
                    row["env_runners"] = runners.num_remote_workers()
                    progress.writerow(row)
                    f.flush()
                    if evaluated is not None and record.add(row["timesteps_total"], evaluated):
                        save_policy_snapshot(algorithm, run_dir / BEST_CHECKPOINT)
                    video = None
                    if evaluated is not None:
                        video = videos.after_evaluation(algorithm, row["timesteps_total"])
                    if writer is not None:
                        write_scalars(writer, result, row["training_iteration"])
                    trackers.log(result, row, row["training_iteration"])
                    if video is not None:
                        trackers.log_video(video, row["training_iteration"])
                        if writer is not None:
                            tensorboard_gif(writer, video, row["training_iteration"])
                    fit_result.progress.append(row)
                    fit_result.last_result = result
                    stopping = should_stop(row, stop)
                    saved = None
                    iteration = row["training_iteration"]
                    if not stopping and checkpoint_freq and iteration % checkpoint_freq == 0:
                        name = f"checkpoint_{iteration:06d}"
                        saved = save_checkpoint(algorithm, run_dir / name, run)
                    if on_iteration is not None:
                        on_iteration(row)
                    if on_result is not None:
                        on_result(row, saved)
                    if stopping:
                        break
            last = fit_result.final
            if last and evaluations.interval and last["training_iteration"] % evaluations.interval:
                final = evaluation_at_budget(algorithm)
                if final is not None and record.add(last["timesteps_total"], final):
                    save_policy_snapshot(algorithm, run_dir / BEST_CHECKPOINT)
            if checkpoint_end:
                checkpoint = save_checkpoint(algorithm, run_dir / "checkpoint", run)
                fit_result.checkpoint_path = checkpoint
            record_final_evaluations(algorithm, settings, record, run_dir)
            failed = False
        except EnvError as error:
            raise EnvError(f"{error}; run directory kept: {run_dir}") from error
        finally:
            if writer is not None:
                writer.close()
            trackers.finish(fit_result.checkpoint_path, failed=failed)
            algorithm.stop()
        return fit_result

    def run_config(
        self,
        config: AlgorithmConfig,
        env: EnvHandle,
        *,
        share_policy: str | None,
        seed: int | None,
    ) -> dict[str, Any]:
        """What a tracker records of the run: algorithm, env, sharing, seed and every
        (resolved) setting."""
        settings = settings_of(config)
        return {
            "algorithm": self.name,
            "env": env.name,
            "env_args": dict(env.env_args),
            "share_policy": share_policy,
            "seed": seed,
            "hyperparam_source": self.hyperparam_source or env.hyperparam_source,
            **dataclasses.asdict(settings),
        }


def mlflow_store(mlflow: str | bool | None) -> str | None:
    """``fit``'s ``mlflow`` as a tracking URI: ``True`` -> ``""`` (the default store
    under the run directory), ``None``/``False`` -> off."""
    if mlflow is True:
        return ""
    return str(mlflow) if mlflow else None
