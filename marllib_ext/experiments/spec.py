"""An experiment file: algorithms x tasks x seeds, a budget and evaluation, as data.

::

    name: smax_small
    algorithms:
      - mappo
      - {algo: qmix, source: pymarl2, label: qmix@pymarl2, set: {td_lambda: 0.6}}
    tasks:
      - smax:3m
      - {env: lbf:Foraging-8x8-2p-2f-coop-v3, env_args: {action_masks: true}}
    seeds: [0, 1, 2]
    stop: {env_steps: 200000}
    evaluation: {every: 5, episodes: 32}
    # optional
    share_policy: group          # default: what each env and algorithm allow
    # an algorithm entry may name the task labels it runs on (`tasks: [smax:3m]`), and a
    # task entry may have its own `stop` (a budget per task); evaluation may also set
    # explore, final_episodes, video_every and budgets (EFX algorithms at the end of the
    # run: the policy played from each fraction of [z_low, z_high], e.g. [0, 0.5, 1])
    checkpoint_every: 10         # iterations between the checkpoints a resume starts from
    resources: {env_runners: 2, envs_per_env_runner: 8, learners: 0, gpus_per_learner: 0}
    tracking: {wandb: my-project, mlflow: true}

Every key and type is checked by :func:`load_experiment`, which names the field it
refuses; :func:`expand` turns the file into one :class:`Trial` per algorithm x task x
seed."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marllib_ext.algos.efx.settings import EFXFields
from marllib_ext.algos.registry import get_algo_spec
from marllib_ext.configs.run_file import (
    RunSpec,
    load_yaml,
    read_evaluation,
    read_mapping,
    read_stop,
    stop_names,
)
from marllib_ext.errors import ConfigError

EXPERIMENT_KEYS = (
    "name", "algorithms", "tasks", "seeds", "stop", "evaluation", "share_policy",
    "checkpoint_every", "resources", "tracking", "description",
)  # fmt: skip
ALGORITHM_KEYS = ("algo", "source", "label", "set", "tasks")
TASK_KEYS = ("env", "env_args", "label", "share_policy", "stop")
# A file's resource names -> settings keys.
RESOURCE_NAMES = {
    "env_runners": "num_env_runners",
    "envs_per_env_runner": "num_envs_per_env_runner",
    "cpus_per_env_runner": "num_cpus_per_env_runner",
    "learners": "num_learners",
    "gpus_per_learner": "num_gpus_per_learner",
}
TRACKING_KEYS = ("wandb", "mlflow")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+=-]*$")
DEFAULT_CHECKPOINT_EVERY = 10


@dataclass(frozen=True)
class AlgorithmEntry:
    algo: str
    source: str | None = None
    label: str = ""
    set: dict[str, Any] = field(default_factory=dict)
    tasks: tuple[str, ...] | None = None  # the task labels it runs on (None: every task)


@dataclass(frozen=True)
class TaskEntry:
    env: str
    env_args: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    share_policy: str | None = None
    stop: dict[str, float] | None = None  # this task's budget (None: the experiment's)


@dataclass(frozen=True)
class Trial:
    """One algorithm x task x seed: the run, where it writes, and its names."""

    run: RunSpec
    algorithm: str  # the algorithm's label
    task: str  # the task's label
    seed: int

    @property
    def name(self) -> str:
        return f"{self.task}/{self.algorithm}/seed_{self.seed}"

    @property
    def path(self) -> Path:
        """The run directory, relative to the experiment's ``runs/``."""
        return Path(slug(self.task)) / slug(self.algorithm) / f"seed_{self.seed}"


@dataclass(frozen=True)
class Experiment:
    name: str
    algorithms: tuple[AlgorithmEntry, ...]
    tasks: tuple[TaskEntry, ...]
    seeds: tuple[int, ...]
    stop: dict[str, float]  # progress-row names
    evaluation: dict[str, Any] = field(default_factory=dict)  # settings keys
    share_policy: str | None = None
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    resources: dict[str, Any] = field(default_factory=dict)  # settings keys
    tracking: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def trials(self) -> list[Trial]:
        return expand(self)

    def to_mapping(self) -> dict[str, Any]:
        """The file's form, every default filled in (written next to the results)."""
        inverse = {key: name for name, key in RESOURCE_NAMES.items()}
        return {
            "name": self.name,
            "description": self.description,
            "algorithms": [
                {**dataclasses.asdict(a), "tasks": list(a.tasks) if a.tasks else None}
                for a in self.algorithms
            ],
            "tasks": [
                {**dataclasses.asdict(t), "stop": stop_names(t.stop) if t.stop else None}
                for t in self.tasks
            ],
            "seeds": list(self.seeds),
            "stop": stop_names(self.stop),
            "evaluation": RunSpec(algo="", env="", evaluation=self.evaluation).to_mapping()[
                "evaluation"
            ],
            "share_policy": self.share_policy,
            "checkpoint_every": self.checkpoint_every,
            "resources": {inverse[k]: v for k, v in self.resources.items()},
            "tracking": dict(self.tracking),
        }


def slug(text: str) -> str:
    """A label as a path component (``smax:3m`` -> ``smax-3m``)."""
    return re.sub(r"[^A-Za-z0-9_.@+=-]+", "-", text).strip("-") or "x"


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _algorithm(entry: Any, where: str) -> AlgorithmEntry:
    if isinstance(entry, str):
        entry = {"algo": entry}
    data = read_mapping(entry, where, ALGORITHM_KEYS)
    if "algo" not in data:
        raise ConfigError(f"{where} needs `algo`")
    algo = _string(data["algo"], f"{where}.algo")
    source = data.get("source")
    if source is not None:
        source = _string(source, f"{where}.source")
    overrides = read_mapping(data.get("set"), f"{where}.set")
    label = data.get("label")
    if label is None:
        label = algo + (f"@{source}" if source else "")
        label += "".join(f"+{k}={v}" for k, v in overrides.items())
    tasks = data.get("tasks")
    if tasks is not None:
        if not isinstance(tasks, list) or not tasks:
            raise ConfigError(f"{where}.tasks must be a non-empty list of task labels")
        tasks = tuple(_string(t, f"{where}.tasks[{i}]") for i, t in enumerate(tasks))
    return AlgorithmEntry(algo, source, _string(label, f"{where}.label"), overrides, tasks)


def _task(entry: Any, where: str) -> TaskEntry:
    if isinstance(entry, str):
        entry = {"env": entry}
    data = read_mapping(entry, where, TASK_KEYS)
    if "env" not in data:
        raise ConfigError(f"{where} needs `env`")
    env = _string(data["env"], f"{where}.env")
    env_args = read_mapping(data.get("env_args"), f"{where}.env_args")
    label = data.get("label")
    if label is None:
        label = env + "".join(f"+{k}={v}" for k, v in env_args.items())
    share_policy = data.get("share_policy")
    if share_policy is not None:
        share_policy = _string(share_policy, f"{where}.share_policy")
    stop = read_stop(data["stop"], f"{where}.stop") if data.get("stop") is not None else None
    return TaskEntry(env, env_args, _string(label, f"{where}.label"), share_policy, stop)


def _unique(labels: list[str], what: str) -> None:
    seen = set()
    for label in labels:
        if slug(label) in seen:
            raise ConfigError(f"two {what} have the label {label!r}; give each its own `label`")
        seen.add(slug(label))


def parse_experiment(data: Any, where: str = "experiment") -> Experiment:
    """The validated experiment of a file's YAML data."""
    data = read_mapping(data, where, EXPERIMENT_KEYS)
    for key in ("name", "algorithms", "tasks", "seeds", "stop"):
        if key not in data:
            raise ConfigError(f"{where} needs `{key}`")
    name = _string(data["name"], "name")
    if not NAME_PATTERN.match(name):
        raise ConfigError(f"name {name!r} must be letters, digits and _.@+=- (a folder name)")
    for key in ("algorithms", "tasks", "seeds"):
        if not isinstance(data[key], list) or not data[key]:
            raise ConfigError(f"{key} must be a non-empty list, got {data[key]!r}")
    algorithms = tuple(_algorithm(a, f"algorithms[{i}]") for i, a in enumerate(data["algorithms"]))
    tasks = tuple(_task(t, f"tasks[{i}]") for i, t in enumerate(data["tasks"]))
    _unique([a.label for a in algorithms], "algorithms")
    _unique([t.label for t in tasks], "tasks")
    labels = {t.label for t in tasks}
    for i, algorithm in enumerate(algorithms):
        for label in algorithm.tasks or ():
            if label not in labels:
                raise ConfigError(
                    f"algorithms[{i}].tasks names {label!r}, which is no task label; the "
                    f"labels: {', '.join(sorted(labels))}"
                )
    seeds = []
    for i, seed in enumerate(data["seeds"]):
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ConfigError(f"seeds[{i}] must be an integer >= 0, got {seed!r}")
        seeds.append(seed)
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must differ, got {seeds}")
    every = data.get("checkpoint_every", DEFAULT_CHECKPOINT_EVERY)
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise ConfigError(f"checkpoint_every must be an integer >= 1, got {every!r}")
    resources = read_mapping(data.get("resources"), "resources", tuple(RESOURCE_NAMES))
    for key, value in resources.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"resources.{key} must be a number >= 0, got {value!r}")
    tracking = read_mapping(data.get("tracking"), "tracking", TRACKING_KEYS)
    if tracking.get("wandb") is not None:
        _string(tracking["wandb"], "tracking.wandb")
    if "mlflow" in tracking and not isinstance(tracking["mlflow"], bool | str | None):
        raise ConfigError(
            f"tracking.mlflow must be true, false or a URI, got {tracking['mlflow']!r}"
        )
    share_policy = data.get("share_policy")
    if share_policy is not None:
        share_policy = _string(share_policy, "share_policy")
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise ConfigError(f"description must be a string, got {description!r}")
    return Experiment(
        name=name,
        algorithms=algorithms,
        tasks=tasks,
        seeds=tuple(seeds),
        stop=read_stop(data["stop"]),
        evaluation=read_evaluation(data.get("evaluation")),
        share_policy=share_policy,
        checkpoint_every=every,
        resources={RESOURCE_NAMES[k]: v for k, v in resources.items()},
        tracking=tracking,
        description=description,
    )


def load_experiment(path: str | Path) -> Experiment:
    return parse_experiment(load_yaml(path), where=str(path))


def trial_evaluation(evaluation: dict[str, Any], algo: str) -> dict[str, Any]:
    """The experiment's evaluation settings for one algorithm: ``budgets`` (EFX's budget
    points) only where the algorithm has a budget, so one file compares EFX with its
    baselines."""
    if "evaluation_budgets" not in evaluation:
        return dict(evaluation)
    if issubclass(get_algo_spec(algo).settings_class, EFXFields):
        return dict(evaluation)
    return {k: v for k, v in evaluation.items() if k != "evaluation_budgets"}


def expand(experiment: Experiment) -> list[Trial]:
    """One trial per task x algorithm x seed, in that order."""
    trials = []
    for task in experiment.tasks:
        for algorithm in experiment.algorithms:
            if algorithm.tasks is not None and task.label not in algorithm.tasks:
                continue
            for seed in experiment.seeds:
                run = RunSpec(
                    algo=algorithm.algo,
                    env=task.env,
                    source=algorithm.source,
                    set={**experiment.resources, **algorithm.set},
                    env_args=dict(task.env_args),
                    share_policy=task.share_policy or experiment.share_policy,
                    seed=seed,
                    stop=dict(task.stop or experiment.stop),
                    evaluation=trial_evaluation(experiment.evaluation, algorithm.algo),
                )
                trials.append(Trial(run, algorithm.label, task.label, seed))
    return trials
