"""Experiment tracking with Weights & Biases and MLflow, beside TensorBoard.

``fit(..., wandb=PROJECT, mlflow=URI)`` and ``marllib-ext train --wandb PROJECT
--mlflow [URI]`` log, per iteration, every numeric entry of RLlib's result (keys
joined by ``/``) and the progress row (``agent_return_mean``, ...), plus the run's
full config at the start and the final checkpoint path at the end. ``tune`` runs go
through Ray's own Tune callbacks (``ray.air.integrations.wandb`` / ``mlflow``); the
plain training loop uses the same libraries directly.

- W&B: ``WANDB_MODE=offline`` (or ``disabled``) runs without an account; the offline
  run lands under the run directory's ``wandb/`` (``wandb sync`` uploads it later).
- MLflow: the default store is ``sqlite:///<run dir>/mlflow.db``. MLflow 3 refuses a
  plain file store unless ``MLFLOW_ALLOW_FILE_STORE=true`` (its issues #18534,
  #23634), so the default is SQLite, which ``mlflow-skinny`` with ``sqlalchemy`` and
  ``alembic`` serves.

Both ship as extras: ``pip install -c constraints.txt -e ".[wandb]"`` / ``".[mlflow]"``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from marllib_ext.configs.run_file import RunSpec, write_run_config
from marllib_ext.errors import ConfigError, install_hint

WANDB_OFFLINE_MODES = ("offline", "disabled")
MLFLOW_EXPERIMENT = "marllib-ext"
_MLFLOW_KEY = re.compile(r"[^0-9A-Za-z_\-. /]")


def _require(module: str, extra: str):
    try:
        return __import__(module)
    except ImportError:
        raise ConfigError(
            f"--{extra} needs the {module!r} package: {install_hint(extra)} "
            f"(or pip install marllib-ext[{extra}])"
        ) from None


def require_mlflow() -> None:
    """MLflow (with SQLAlchemy for the default SQLite store) is installed."""
    _require("mlflow", "mlflow")
    _require("sqlalchemy", "mlflow")


def default_mlflow_uri(directory: str | Path) -> str:
    """``sqlite:///<directory>/mlflow.db`` (absolute)."""
    return f"sqlite:///{(Path(directory).resolve() / 'mlflow.db')}"


def create_local_experiment(tracking_uri: str, name: str, directory: Path) -> None:
    """Creates experiment ``name`` in the default store with its artifacts under
    ``<directory>/mlartifacts`` (MLflow's own default is ``./mlruns`` of the working
    directory, which would scatter artifacts wherever training was started)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    if client.get_experiment_by_name(name) is None:
        location = (Path(directory).resolve() / "mlartifacts").as_uri()
        client.create_experiment(name, artifact_location=location)


def check_wandb_credentials() -> None:
    """W&B online needs an API key; say how to run without one."""
    wandb = _require("wandb", "wandb")
    if os.environ.get("WANDB_MODE") in WANDB_OFFLINE_MODES:
        return
    if os.environ.get("WANDB_API_KEY") or wandb.api.api_key:
        return
    raise ConfigError(
        "--wandb: no W&B API key (set WANDB_API_KEY or run `wandb login`), or set "
        "WANDB_MODE=offline to keep the run on disk"
    )


def numeric_entries(result: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Every finite numeric entry of a nested result dict, keyed by its ``/`` path."""
    flat: dict[str, float] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(numeric_entries(value, prefix=f"{name}/"))
        elif is_finite_number(value):
            flat[name] = float(value)
    return flat


def is_finite_number(value: Any) -> bool:
    numeric = isinstance(value, int | float | np.floating | np.integer)
    return numeric and not isinstance(value, bool) and math.isfinite(float(value))


def plain_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run config with every value JSON-serializable (others as their ``str``)."""
    return json.loads(json.dumps(dict(config), default=str))


VIDEO_KEY = "evaluation/video"  # the videos' tag in W&B and TensorBoard


def tensorboard_gif(writer, path: Path, step: int, tag: str = VIDEO_KEY) -> None:
    """An animated GIF as a TensorBoard image summary (what ``add_video`` writes, without
    moviepy: TensorBoard's image dashboard plays the GIF)."""
    from PIL import Image
    from tensorboardX.proto.summary_pb2 import Summary

    with Image.open(path) as gif:
        width, height = gif.size
    image = Summary.Image(
        height=height, width=width, colorspace=3, encoded_image_string=Path(path).read_bytes()
    )
    writer._get_file_writer().add_summary(
        Summary(value=[Summary.Value(tag=tag, image=image)]), step
    )


@dataclass
class Trackers:
    """The plain training loop's W&B and MLflow runs (each ``None`` when off)."""

    wandb_run: Any = None
    mlflow: Any = None

    @classmethod
    def start(
        cls,
        run_dir: Path,
        config: Mapping[str, Any],
        *,
        wandb_project: str | None,
        mlflow_uri: str | None,
    ) -> Trackers:
        trackers = cls()
        if wandb_project:
            wandb = _require("wandb", "wandb")
            trackers.wandb_run = wandb.init(
                project=wandb_project,
                name=run_dir.name,
                dir=str(run_dir),
                config=plain_config(config),
            )
        if mlflow_uri is not None:
            require_mlflow()
            mlflow = _require("mlflow", "mlflow")
            uri = mlflow_uri or default_mlflow_uri(run_dir)
            if not mlflow_uri:
                create_local_experiment(uri, MLFLOW_EXPERIMENT, run_dir)
            mlflow.set_tracking_uri(uri)
            mlflow.set_experiment(MLFLOW_EXPERIMENT)
            mlflow.start_run(run_name=run_dir.name)
            plain = plain_config(config)
            # Params are short strings; the whole config goes in as a JSON artifact too.
            mlflow.log_params({k: str(v)[:500] for k, v in plain.items()})
            mlflow.log_dict(plain, "config.json")
            trackers.mlflow = mlflow
        return trackers

    def log(self, result: Mapping[str, Any], row: Mapping[str, float], step: int) -> None:
        metrics = {**numeric_entries(result), **numeric_entries(row)}
        if self.wandb_run is not None:
            self.wandb_run.log(metrics, step=step)
        if self.mlflow is not None:
            self.mlflow.log_metrics(
                {_MLFLOW_KEY.sub("_", k): v for k, v in metrics.items()}, step=step
            )

    def log_video(self, path: Path, step: int) -> None:
        """An evaluation's GIF: a W&B video and an MLflow artifact under ``videos/``."""
        if self.wandb_run is not None:
            wandb = _require("wandb", "wandb")
            self.wandb_run.log({VIDEO_KEY: wandb.Video(str(path), format="gif")}, step=step)
        if self.mlflow is not None:
            self.mlflow.log_artifact(str(path), artifact_path="videos")

    def finish(self, checkpoint_path: Path | None, *, failed: bool = False) -> None:
        path = "" if checkpoint_path is None else str(Path(checkpoint_path).resolve())
        if self.wandb_run is not None:
            self.wandb_run.summary["checkpoint_path"] = path
            self.wandb_run.finish(exit_code=1 if failed else 0)
        if self.mlflow is not None:
            self.mlflow.set_tag("checkpoint_path", path)
            self.mlflow.end_run(status="FAILED" if failed else "FINISHED")


def tune_callbacks(
    *, wandb_project: str | None, mlflow_uri: str | None, storage: Path, experiment: str
) -> list:
    """Ray's own Tune logger callbacks for a sweep (each trial one W&B / MLflow run)."""
    callbacks = []
    if wandb_project:
        check_wandb_credentials()
        from ray.air.integrations.wandb import WandbLoggerCallback

        callbacks.append(WandbLoggerCallback(project=wandb_project, group=experiment))
    if mlflow_uri is not None:
        require_mlflow()
        from ray.air.integrations.mlflow import MLflowLoggerCallback

        storage.mkdir(parents=True, exist_ok=True)
        uri = mlflow_uri or default_mlflow_uri(storage)
        if not mlflow_uri:
            create_local_experiment(uri, experiment, storage)
        callbacks.append(
            MLflowLoggerCallback(
                tracking_uri=uri,
                experiment_name=experiment,
                save_artifact=False,
            )
        )
    return callbacks


# ---- the run directory ----------------------------------------------------------------
def save_checkpoint(algorithm, path: Path, run: RunSpec) -> Path:
    """RLlib's checkpoint at ``path`` with the run's ``config.yaml`` in it (what
    ``--resume`` reads)."""
    algorithm.save_to_path(str(Path(path).resolve()))
    write_run_config(path, run)
    return Path(path)


def continued_progress(run_dir: Path, iteration: int, fields) -> list[dict[str, Any]]:
    """Rewrites ``run_dir/progress.csv`` to the rows up to ``iteration`` (those a
    restored checkpoint had reached) under ``fields`` and returns them; later rows were
    trained by the interrupted process and are trained again. A column the earlier
    rows lack (a field added since) reads ``nan`` there, as an absent value does."""
    path = Path(run_dir) / "progress.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        rows = [row for row in csv.DictReader(f) if int(row["training_iteration"]) <= iteration]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(fields), extrasaction="ignore", restval="nan")
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        row["timesteps_total"] = int(row["timesteps_total"])
    return rows


def tensorboard_writer(run_dir: Path):
    from tensorboardX import SummaryWriter

    return SummaryWriter(str(run_dir / "tb"))


def write_scalars(writer, result: Mapping[str, Any], step: int) -> None:
    """Every finite numeric entry of the (nested) result dict, keyed by its path."""
    for name, value in numeric_entries(result).items():
        writer.add_scalar(name, value, step)


def new_run_dir(root: Path, stem: str) -> Path:
    """A fresh directory; never reuses one, so earlier runs are never overwritten."""
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(1000):
        run_dir = root / (f"{stem}_{stamp}" + (f"_{attempt}" if attempt else ""))
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a fresh run directory under {root}")
