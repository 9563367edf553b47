"""Starting Ray (local, or the cluster at ``--address``) and importing user modules."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from marllib_ext.errors import ConfigError


def set_threads(threads: int | None) -> str:
    """Sets this process's torch threads and, where unset, ``OMP_NUM_THREADS`` for the
    Ray workers it starts; returns the line that states them.

    Why 1 by default: the driver samples and learns with torch's default of one thread
    per core, whose OpenMP workers spin while they wait. Two SMAX ``qmix`` runs side by
    side on 2 cores then ran at 70 and 68 env steps/s against 738 alone; with one thread
    each at 582 and 479 against 715 alone, and a run alone lost 3%
    (``benchmarks/side_by_side.py``). JAX (SMAX) keeps XLA's own pool."""
    import torch

    if threads is None or threads < 0:
        raise ConfigError(f"--threads must be >= 0, got {threads!r}")
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
