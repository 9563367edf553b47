"""Rebuilding a trained algorithm from its checkpoint to play episodes (``evaluate``,
EFX's budget sweep): the env it names registered, one local env runner, frames
recorded when rendering."""

from __future__ import annotations

import contextlib
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from marllib_ext.envs.adapter import TRAINING_ONLY_ENV_ARGS
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.envs.registry import list_envs
from marllib_ext.errors import ConfigError
from marllib_ext.rllib_compat.checkpoints import without_replay
from marllib_ext.rllib_compat.env_runners import registered_env_creator

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


def save_video(frames: list[np.ndarray], path: Path, fps: int = 10) -> Path:
    """Writes ``frames`` (``(height, width, 3)`` uint8) as an animated GIF (Pillow, which
    matplotlib already needs), ``fps`` frames per second, looping."""
    from PIL import Image

    if not frames:
        raise ConfigError("no frames to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(np.asarray(frame, np.uint8)) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return path


def check_checkpoint(checkpoint: str | Path, episodes: int) -> Path:
    path = Path(checkpoint)
    if not path.exists():
        raise ConfigError(f"checkpoint {str(path)!r} does not exist")
    if episodes < 1:
        raise ConfigError(f"episodes must be >= 1, got {episodes}")
    return path


CONSTRUCTOR_FILE = "class_and_ctor_args.pkl"  # RLlib's Checkpointable: class, ctor args


def saved_constructor(path: Path) -> tuple[type, Any] | None:
    """The algorithm class and its config's state (the dict ``AlgorithmConfig.get_state``
    gives; ``None`` without constructor args) from a checkpoint's constructor file;
    ``None`` without one."""
    ctor_file = path / CONSTRUCTOR_FILE
    if not ctor_file.exists():
        return None
    with open(ctor_file, "rb") as f:
        saved = pickle.load(f)
    args, _ = saved["ctor_args_and_kwargs"]
    return saved["class"], (args[0] if args else None)


def register_checkpoint_env(path: Path) -> None:
    """Registers with RLlib the env a checkpoint names by our registry id: every
    registered env, and a by-name family's env (``vmas:navigation``, ``magent:...``)
    that this process has not built yet."""
    for name in list_envs():
        EnvHandle(name).register_with_rllib()
    saved = saved_constructor(path)
    config_state = saved[1] if saved is not None else None
    env_id = config_state.get("env") if isinstance(config_state, dict) else None
    handle = EnvHandle.from_rllib_env_id(env_id) if isinstance(env_id, str) else None
    if handle is not None and handle.name not in list_envs():
        handle.register_with_rllib()


def checkpoint_algorithm(path: Path) -> tuple[type, Any]:
    """The algorithm class and its config (an ``AlgorithmConfig``, unfrozen) that a
    checkpoint was saved from, without building the algorithm or loading its state
    (what ``Algorithm.from_checkpoint`` builds from)."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    saved = saved_constructor(path)
    if saved is None or not isinstance(saved[1], dict):
        raise ConfigError(
            f"{str(path)!r} is not an algorithm checkpoint (no config in {CONSTRUCTOR_FILE})"
        )
    algorithm_class, config_state = saved
    return algorithm_class, AlgorithmConfig.from_state(config_state)


@contextlib.contextmanager
def restored_algorithm(path: Path, *, render: str | None = None, configure=None):
    """The checkpoint's algorithm rebuilt with one local env runner of a single env and
    restored without its replay store (``rllib_compat.checkpoints``); stopped on exit.
    ``configure(config)`` edits the config before the build (cross-play adds modules). One env:
    RLlib's ``sample(num_episodes=N)`` over several envs keeps the first N episodes to
    end and drops the rest, which over-represents short episodes (on tasks where success
    ends an episode, successes)."""
    register_checkpoint_env(path)
    algorithm_class, config = checkpoint_algorithm(path)
    # Episodes only, no training: the fragment length need not divide the train batch.
    config.env_runners(
        num_env_runners=0,
        num_envs_per_env_runner=1,
        rollout_fragment_length="auto",
    )
    env_config = evaluation_env_config(config)  # no training-only reward shaping
    if env_config is not None:
        config.environment(env_config=env_config)
    if render is not None:
        config.environment(env_config={**config.env_config, "render_mode": render})
        config.callbacks(on_episode_start=record_frame, on_episode_step=record_frame)
    if configure is not None:
        configure(config)
    algorithm = algorithm_class(config)
    try:
        with without_replay(algorithm):
            algorithm.restore_from_path(str(path.resolve()))
        yield algorithm
    finally:
        algorithm.stop()


def evaluation_env_config(config) -> dict[str, Any] | None:
    """The env config evaluations run with: the training one without its reward shaping
    (``TRAINING_ONLY_ENV_ARGS``, where the env takes them), or ``None`` where nothing
    differs."""
    spec = getattr(registered_env_creator(config.env), "spec", None)
    takes = {**getattr(spec, "env_args", {}), **config.env_config}
    evaluation = {k: v for k, v in TRAINING_ONLY_ENV_ARGS.items() if k in takes}
    if not evaluation:
        return None
    return {**config.env_config, **evaluation}
