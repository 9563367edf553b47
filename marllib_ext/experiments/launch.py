"""``marllib-ext benchmark``: an experiment file's trials on Ray Tune.

The experiment's folder ``<out>/<name>/`` holds::

    experiment.yaml          the file as run, every default filled in
    tune/                    Tune's experiment state and its trial folders (the latest
                             checkpoint of each unfinished trial)
    runs/<task>/<algorithm>/seed_<s>/
                             each trial's run directory: config.yaml, progress.csv,
                             tb/, metrics.json, checkpoint/
    summary.md               per task: mean and 95% interval per algorithm at the budget
    report/                  ``marllib-ext report`` over the runs (IQM, ...)
    .running                 locked by the process running the experiment

Running the command again continues the experiment with Tune's own restore
(``Tuner.restore``): finished trials are kept, unfinished and failed ones resume from
their last checkpoint. Without Tune's state (stored results checked out elsewhere) a
trial whose folder holds its finished run keeps it and the others start over. A trial
that fails is reported by name and the others go on."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import yaml

from marllib_ext.algos.api import Algo
from marllib_ext.configs.run_file import RunSpec
from marllib_ext.envs.handle import make_env
from marllib_ext.errors import ConfigError
from marllib_ext.experiments.progress import PROGRESS_EVERY_S, progress_callback
from marllib_ext.experiments.spec import Experiment, Trial, parse_experiment, slug
from marllib_ext.experiments.summary import stored_run_finished, write_summary

EXPERIMENT_FILE = "experiment.yaml"
LOCK_FILE = ".running"
TUNE_DIR = "tune"
RUNS_DIR = "runs"
REPORT_DIR = "report"
INTERRUPTED = 130  # exit status of a run stopped before every trial finished (as SIGINT)


def checked_trials(experiment: Experiment) -> list[tuple[Trial, Any]]:
    """Every trial with its RLlib config, each built once before anything starts (an
    unknown algorithm, key, type, env or sharing mode is refused naming the trial)."""
    envs: dict[str, Any] = {}
    checked = []
    for trial in experiment.trials():
        run = trial.run
        try:
            if trial.task not in envs:
                envs[trial.task] = make_env(run.env, **run.env_args)
            env = envs[trial.task]
            algo = Algo(run.algo, run.source)
            config = algo.rllib_config(
                env, share_policy=run.share_policy, seed=run.seed, **run.overrides()
            )
        except ConfigError as error:
            raise ConfigError(f"trial {trial.name}: {error}") from error
        checked.append((trial, config))
    return checked


def plan(experiment: Experiment, checked: list[tuple[Trial, Any]]) -> str:
    """What ``--dry-run`` prints: every trial, its budget and its resources."""
    budget = ", ".join(f"{k} {v:g}" for k, v in _budget(experiment).items())
    per_task = " (some tasks have their own)" if any(t.stop for t in experiment.tasks) else ""
    lines = [f"experiment {experiment.name}: {len(checked)} trials, each until {budget}{per_task}"]
    for trial, config in checked:
        bundles = config.algo_class.default_resource_request(config).bundles
        cpus = sum(b.get("CPU", 0) for b in bundles)
        gpus = sum(b.get("GPU", 0) for b in bundles)
        lines.append(
            f"  {trial.name:<60} {trial.run.algo:<12} {cpus:g} CPU"
            + (f" {gpus:g} GPU" if gpus else "")
        )
    budgets = [trial.run.stop.get("timesteps_total") for trial, _ in checked]
    if all(budgets):
        lines.append(f"total: {sum(budgets):,.0f} env steps")
    return "\n".join(lines)


def _budget(experiment: Experiment) -> dict[str, float]:
    return RunSpec(algo="", env="", stop=experiment.stop).to_mapping()["stop"]


# ---- one trial, inside its Tune actor ------------------------------------------------
def _follow_cpu_share() -> int:
    """torch and OpenMP threads = the CPUs this trial's process holds, so trials side
    by side do not oversubscribe the cores."""
    import ray
    import torch

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
    threads = max(1, int(cpus))
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    return threads


def run_trial(config: dict[str, Any]) -> None:
    """Tune's function trainable: one run (``Algo.fit``) in its fixed run directory,
    reporting every iteration and handing Tune each periodic checkpoint; restarted by
    Tune, it resumes from the last one."""
    from ray import tune

    trial = config["trial"]
    for module in trial.get("imports", []):
        __import__(module)
    _follow_cpu_share()
    run = RunSpec.from_mapping(trial["run"], where=trial["name"])
    run_dir = Path(trial["run_dir"])
    checkpoint = tune.get_checkpoint()
    if checkpoint is None and stored_run_finished(run, run_dir):
        return  # a finished run stored without Tune's state (results checked out): kept
    if checkpoint is None and run_dir.exists():
        shutil.rmtree(run_dir)  # started before and stopped ahead of its first checkpoint

    def report(row: dict[str, float], saved: Path | None) -> None:
        metrics = {k: v for k, v in row.items() if isinstance(v, int | float)}
        if saved is None:
            tune.report(metrics)
            return
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(saved)))
        shutil.rmtree(saved, ignore_errors=True)  # Tune keeps its copy in the trial folder

    tracking = trial.get("tracking") or {}
    resume = checkpoint.as_directory() if checkpoint is not None else contextlib.nullcontext()
    with resume as resume_from:
        Algo(run.algo, run.source).fit(
            run.env if not run.env_args else make_env(run.env, **run.env_args),
            stop=run.stop,
            share_policy=run.share_policy,
            seed=run.seed,
            run_dir=run_dir,
            resume_from=resume_from,
            checkpoint_freq=int(trial["checkpoint_every"]),
            on_result=report,
            label=trial["algorithm"],
            task_label=trial["task"] if trial["task"] != run.env else None,
            wandb=tracking.get("wandb"),
            mlflow=tracking.get("mlflow"),
            **run.overrides(),
        )


def trial_dirname(trial) -> str:
    return slug(trial.config["trial"]["name"].replace("/", "__"))


def _trial_name(result, configs: list[dict[str, Any]]) -> str:
    """A result's trial name (from its folder where the worker never started)."""
    if result.config:
        return result.config["trial"]["name"]
    by_folder = {slug(c["name"].replace("/", "__")): c["name"] for c in configs}
    return by_folder.get(Path(result.path).name, Path(result.path).name)


def _resources(config: dict[str, Any]):
    """The trial's RLlib resource request (driver, learners, env runners)."""
    trial = config["trial"]
    run = RunSpec.from_mapping(trial["run"], where=trial["name"])
    rllib_config = Algo(run.algo, run.source).rllib_config(
        make_env(run.env, **run.env_args),
        share_policy=run.share_policy,
        seed=run.seed,
        **run.overrides(),
    )
    return rllib_config.algo_class.default_resource_request(rllib_config)


def experiment_dir(experiment: Experiment, out: str | Path) -> Path:
    return Path(out).resolve() / experiment.name


def _trial_configs(
    experiment: Experiment, root: Path, checked, imports: list[str]
) -> list[dict[str, Any]]:
    return [
        {
            "name": trial.name,
            "algorithm": trial.algorithm,
            "task": trial.task,
            "seed": trial.seed,
            "run": trial.run.to_mapping(),
            "run_dir": str(root / RUNS_DIR / trial.path),
            "checkpoint_every": experiment.checkpoint_every,
            "tracking": dict(experiment.tracking),
            "imports": list(imports),
        }
        for trial, _ in checked
    ]


def check_same_experiment(root: Path, experiment: Experiment) -> None:
    """A continued experiment must be the one started there: its trials unchanged."""
    saved = root / EXPERIMENT_FILE
    if not saved.exists():
        return
    before = yaml.safe_load(saved.read_text())
    with contextlib.suppress(ConfigError):  # an older layout of the same fields
        before = parse_experiment(before, where=str(saved)).to_mapping()
    before = yaml.safe_load(yaml.safe_dump(before, sort_keys=False))
    now = yaml.safe_load(yaml.safe_dump(experiment.to_mapping(), sort_keys=False))
    if before != now:
        changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        raise ConfigError(
            f"{root} holds experiment {before.get('name')!r} started with other "
            f"{', '.join(changed)}; running it again continues it as it was. Give the "
            "changed file a new name (or another --out), or restore the file"
        )


@contextlib.contextmanager
def held_experiment(root: Path):
    """Holds ``root/.running`` locked while this process runs the experiment, so that a
    second ``benchmark`` on the same folder is refused before it writes into the trials
    the first one is writing. The lock (``flock``) ends with the process, so a killed
    run leaves nothing to clean up."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): unguarded, as Tune itself is
        yield
        return
    handle = open(root / LOCK_FILE, "a+")  # noqa: SIM115 - held until the block ends
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConfigError(
            f"{root} is being run by {holder}; two runs of one experiment would write the "
            "same trials' files. Wait for it to end (or stop it), then run the command again"
        ) from None
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} on {socket.gethostname()}")
        handle.flush()
        yield
    finally:
        handle.close()


def run_benchmark(
    experiment: Experiment,
    *,
    out: str | Path = "benchmarks_out",
    max_concurrent: int | None = None,
    dry_run: bool = False,
    imports: list[str] | None = None,
    progress_every_s: float = PROGRESS_EVERY_S,
) -> int:
    """Runs (or continues) ``experiment``; returns 0 when every trial finished, 1 when
    any failed, 130 when stopped (Ctrl-C) with trials unfinished. Ray must be
    initialized unless ``dry_run``."""

    checked = checked_trials(experiment)
    if dry_run:
        print(plan(experiment, checked))
        return 0
    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(f"--max-concurrent must be >= 1, got {max_concurrent}")
    root = experiment_dir(experiment, out)
    check_same_experiment(root, experiment)
    root.mkdir(parents=True, exist_ok=True)
    with held_experiment(root):
        return _run_held(experiment, root, checked, max_concurrent, imports, progress_every_s)


def _run_held(experiment, root, checked, max_concurrent, imports, progress_every_s) -> int:
    """:func:`run_benchmark` once its folder is held."""
    from ray import tune

    (root / EXPERIMENT_FILE).write_text(yaml.safe_dump(experiment.to_mapping(), sort_keys=False))
    configs = _trial_configs(experiment, root, checked, imports or [])
    # Tune's note on frequent state snapshots is about its own bookkeeping, not the runs.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    trainable = tune.with_resources(run_trial, _resources)
    tune_path = root / TUNE_DIR
    callbacks = [progress_callback(progress_every_s)]
    if tune.Tuner.can_restore(str(tune_path)):
        print(f"continuing experiment {experiment.name} in {root}", flush=True)
        tuner = tune.Tuner.restore(
            str(tune_path),
            trainable,
            resume_unfinished=True,
            resume_errored=True,
            param_space={"trial": tune.grid_search(configs)},
        )
        if max_concurrent is not None:
            print("--max-concurrent: a continued experiment keeps its first run's", flush=True)
    else:
        print(f"experiment {experiment.name}: {len(configs)} trials in {root}", flush=True)
        tuner = tune.Tuner(
            trainable,
            param_space={"trial": tune.grid_search(configs)},
            tune_config=tune.TuneConfig(
                max_concurrent_trials=max_concurrent, trial_dirname_creator=trial_dirname
            ),
            run_config=tune.RunConfig(
                name=TUNE_DIR,
                storage_path=str(root),
                verbose=0,
                callbacks=callbacks,
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                failure_config=tune.FailureConfig(max_failures=0, fail_fast=False),
            ),
        )
    results = tuner.fit()
    failed = [(_trial_name(result, configs), result.error) for result in results if result.error]
    failed_names = {name for name, _ in failed}
    unfinished = [
        config["name"]
        for config, (trial, _) in zip(configs, checked, strict=True)
        if config["name"] not in failed_names
        and not (Path(config["run_dir"]) / "checkpoint").exists()
        and not stored_run_finished(trial.run, Path(config["run_dir"]))
    ]
    summary = write_summary(experiment, root, [t for t, _ in checked], RUNS_DIR)
    print(f"summary: {summary}")
    _report(root)
    for name, error in failed:
        last = ([ln for ln in str(error).strip().splitlines() if ln.strip()] or [error])[-1]
        print(f"FAILED {name}: {last}", file=sys.stderr)
    if failed:
        again = "run the command again to resume them from their last checkpoint"
        print(f"{len(failed)} of {len(configs)} trials failed; {again}", file=sys.stderr)
    if unfinished:
        print(
            f"stopped with {len(unfinished)} of {len(configs)} trials unfinished; run the same "
            "command again to continue them",
            file=sys.stderr,
        )
        return INTERRUPTED
    return 1 if failed else 0


def _report(root: Path) -> None:
    """``marllib-ext report`` over the experiment's runs (where they evaluated)."""
    from marllib_ext.report import find_metric_files, load_records, report_data, write_report

    try:
        files = find_metric_files([root / RUNS_DIR])
        data = report_data(load_records(files))
    except ConfigError as error:
        print(f"report: skipped ({error})")
        return
    write_report(data, root / REPORT_DIR)
    print(f"report: {root / REPORT_DIR / 'report.md'}")
