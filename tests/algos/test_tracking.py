"""Experiment tracking without network: a W&B offline run and an MLflow SQLite store,
each holding every iteration's numbers, the run's config and the checkpoint path."""

import glob
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from marllib_ext.cli import main

SMALL = [
    "--env", "mpe:simple_spread", "--env-arg", "max_cycles=5", "--stop-iters", "2",
    "--num-cpus", "2", "--set", "train_batch_size=150", "--set", "minibatch_size=75",
    "--set", "num_epochs=1",
]  # fmt: skip


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    """One ``train mappo --wandb demo --mlflow`` run (W&B offline, MLflow's default
    store), started in an empty working directory, evaluated every iteration with a
    video every second evaluation (``--eval-video-every 2``)."""
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    root = tmp_path_factory.mktemp("tracked")
    # Its own process: the CLI starts and stops its own Ray.
    done = subprocess.run(
        [sys.executable, "-m", "marllib_ext.cli", "train", "mappo", *SMALL,
         "--eval-every", "1", "--eval-episodes", "1", "--eval-video-every", "2",
         "--local-dir", str(root / "runs"), "--wandb", "demo", "--mlflow"],
        env={**os.environ, "WANDB_MODE": "offline"},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in root.iterdir()) == ["runs"]  # nothing left in the cwd
    (run_dir,) = (root / "runs").iterdir()
    return run_dir, f"sqlite:///{run_dir / 'mlflow.db'}"


def wandb_records(path: str):
    """The protobuf records of an offline ``.wandb`` file: a 7-byte W&B header, then
    LevelDB's log format (32 KiB blocks; 7-byte chunk headers: crc, length, kind)."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # full, last
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending + chunk if kind == 4 else chunk)
            yield record
        elif kind == 2:  # first
            pending = chunk
        elif kind == 3:  # middle
            pending += chunk


def items(updates) -> dict:
    return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in updates}


def test_wandb_offline_run_has_every_iteration_the_config_and_the_checkpoint(tracked_run):
    run_dir, _ = tracked_run
    (path,) = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    history, config, summary = [], {}, {}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append(items(record.history.item))
        elif kind == "run":
            config.update(items(record.run.config.update))
        elif kind == "summary":
            summary.update(items(record.summary.update))
    assert [row["_step"] for row in history] == [1, 2]
    progress = (run_dir / "progress.csv").read_text().splitlines()
    returns = [float(line.split(",")[3]) for line in progress[1:]]  # agent_return_mean
    assert [row["agent_return_mean"] for row in history] == pytest.approx(returns)
    assert all("env_runners/episode_return_mean" in row for row in history)
    assert config["algorithm"] == "mappo" and config["env"] == "mpe:simple_spread"
    assert config["train_batch_size"] == 150
    assert summary["checkpoint_path"] == str((run_dir / "checkpoint").resolve())


def test_mlflow_run_has_every_iteration_the_config_and_the_checkpoint(tracked_run):
    from mlflow.tracking import MlflowClient

    run_dir, uri = tracked_run
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("marllib-ext").experiment_id])
    history = client.get_metric_history(run.info.run_id, "agent_return_mean")
    assert [point.step for point in history] == [1, 2]
    assert run.data.params["algorithm"] == "mappo" and run.data.params["train_batch_size"] == "150"
    assert run.data.tags["checkpoint_path"] == str((run_dir / "checkpoint").resolve())
    assert run.info.status == "FINISHED"
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    assert artifacts.is_relative_to(run_dir / "mlartifacts")
    assert (artifacts / "config.json").is_file()


@pytest.mark.parametrize(("flag", "module"), [("--wandb", "wandb"), ("--mlflow", "mlflow")])
def test_a_missing_library_is_one_error_line(monkeypatch, capsys, flag, module):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    code = main(["train", "mappo", *SMALL, flag, "demo"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [
        f"marllib-ext: error: --{module} needs the {module!r} package: pip install -c "
        f'constraints.txt -e ".[{module}]" (or pip install marllib-ext[{module}])'
    ]


def test_wandb_online_without_an_api_key_says_how_to_run_offline(monkeypatch, capsys, tmp_path):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc with a key
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "online")
    assert main(["train", "mappo", *SMALL, "--wandb", "demo"]) == 2
    assert "WANDB_MODE=offline" in capsys.readouterr().err


@pytest.mark.slow
def test_tune_logs_each_trial_to_mlflow_through_rays_callback(tmp_path):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "marllib_ext.cli", "tune", "mappo", *SMALL,
         "--grid", "lr=0.001,0.0003", "--local-dir", str(tmp_path / "runs"), "--mlflow", uri],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(uri)
    (experiment,) = [e for e in client.search_experiments() if e.name.startswith("mappo_")]
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2
    for run in runs:
        steps = client.get_metric_history(run.info.run_id, "agent_return_mean")
        assert len(steps) == 2


def test_evaluation_videos_reach_the_run_dir_tensorboard_wandb_and_mlflow(tracked_run):
    """``--eval-video-every 2``: the second evaluation renders one episode to
    ``videos/step_<env steps>.gif``, a TensorBoard image summary, a W&B video and an
    MLflow artifact; the checkpoint it was rendered from is not left behind."""
    from mlflow.tracking import MlflowClient
    from PIL import Image

    run_dir, _ = tracked_run
    (video,) = (run_dir / "videos").iterdir()  # evaluations 1 and 2: one video
    assert video.name.startswith("step_") and video.suffix == ".gif"
    with Image.open(video) as gif:  # identical consecutive frames merge (a greedy no-op)
        durations = []
        for index in range(gif.n_frames):
            gif.seek(index)
            durations.append(gif.info["duration"])
        assert gif.size == (700, 700)
    assert sum(durations) >= 600  # the reset frame and one per step, 10 per second
    assert not (run_dir / "checkpoint_video").exists()
    (events,) = (run_dir / "tb").glob("events.out.tfevents.*")
    assert b"evaluation/video" in events.read_bytes() and b"GIF89a" in events.read_bytes()
    (path,) = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    logged = [
        items(record.history.item)
        for record in wandb_records(path)
        if record.WhichOneof("record_type") == "history"
    ]
    videos = [row for row in logged if "evaluation/video/_type" in row]
    assert [row["evaluation/video/_type"] for row in videos] == ["video-file"]
    assert videos[0]["evaluation/video/path"].endswith(".gif")
    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("marllib-ext").experiment_id])
    assert [a.path for a in client.list_artifacts(run.info.run_id, "videos")] == [
        f"videos/{video.name}"
    ]


def test_a_continued_progress_file_fills_columns_added_since_with_nan(tmp_path):
    """Rows written before a progress field existed read nan in it, not an empty cell
    that no float reader takes; rows past the checkpoint's iteration are dropped."""
    import csv

    from marllib_ext.algos.tracking import continued_progress

    (tmp_path / "progress.csv").write_text(
        "training_iteration,timesteps_total,old\n1,100,0.5\n2,200,0.7\n3,300,0.9\n"
    )
    kept = continued_progress(tmp_path, 2, ["training_iteration", "timesteps_total", "old", "new"])
    assert [row["timesteps_total"] for row in kept] == [100, 200]
    with open(tmp_path / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(row["old"], row["new"]) for row in rows] == [("0.5", "nan"), ("0.7", "nan")]
