"""Starting Ray (local, or the cluster at ``--address``) and importing user modules."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from marllib_ext.errors import ConfigError


def available_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity masks (macOS)
        return os.cpu_count() or 1


def set_threads(threads: int | None, num_cpus: int | None = None) -> str:
    """Sets this process's torch threads; returns the line that states them.

    ``None`` (the default): the cores the run is given, ``num_cpus`` (``--num-cpus``),
    else ``OMP_NUM_THREADS`` where set (a scheduler's share), else the cores this
    process may use, so one run alone learns on all of them. A count
    sets that many and, where unset, ``OMP_NUM_THREADS`` for the Ray workers the run
    starts; ``0`` keeps torch's default. Runs side by side on few cores take their
    share (``--threads 1``; ``benchmark`` gives each trial its CPU share): with torch's
    default, two SMAX ``qmix`` runs side by side on 2 cores ran at 70 and 68 env
    steps/s against 738 alone; with one thread each at 582 and 479
    (``benchmarks/side_by_side.py``). JAX (SMAX) keeps XLA's own pool."""
    import torch

    if threads is not None and threads < 0:
        raise ConfigError(f"--threads must be >= 0, got {threads!r}")
    if threads is None:
        given = os.environ.get("OMP_NUM_THREADS", "")
        if num_cpus:
            cores, source = num_cpus, "--num-cpus"
        elif given.isdigit() and int(given) > 0:  # a scheduler's or Ray worker's share
            cores, source = int(given), "OMP_NUM_THREADS"
        else:
            cores, source = available_cores(), "the cores available"
        torch.set_num_threads(cores)
        return f"threads: torch {torch.get_num_threads()} in this process ({source})"
    if threads:
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    return f"threads: torch {torch.get_num_threads()} in this process"


def init_ray(args: argparse.Namespace) -> None:
    """A local Ray, or the cluster at ``--address`` / ``RAY_ADDRESS`` (``ray job submit``)."""
    import ray

    from marllib_ext.rllib_compat.cluster import ray_address

    address = ray_address(args.address)
    if address != "local":
        if args.num_cpus is not None:
            raise ConfigError("--num-cpus applies to a local Ray only, not with --address")
        ray.init(address=address, configure_logging=False, log_to_driver=args.verbose)
    else:
        ray.init(
            address=address,
            num_cpus=args.num_cpus,
            include_dashboard=False,
            configure_logging=False,
            log_to_driver=args.verbose,
        )


def import_user_modules(modules: list[str]) -> None:
    """Imports ``--import`` modules the way ``python -m`` finds them: the current
    directory first. Ray workers started from here inherit it through PYTHONPATH, so
    they can unpickle the user's env factories too."""
    cwd = os.getcwd()
    if modules and cwd not in sys.path:
        sys.path.insert(0, cwd)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (cwd, os.environ.get("PYTHONPATH")) if p
        )
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"--import {module}: {e}") from e
        except Exception as e:  # noqa: BLE001 - the user's module failed while importing
            raise ConfigError(f"--import {module}: {type(e).__name__}: {e}") from e
