"""Command line: ``marllib-ext train|tune|evaluate|plot|list``. Thin: YAML -> typed
config -> RLlib. ``parser`` builds the arguments; each command is one module."""

from __future__ import annotations

import os
import sys

from marllib_ext.cli.arguments import parse_assignments, parse_grid
from marllib_ext.cli.listing import algorithm_table_markdown, env_table_markdown
from marllib_ext.cli.parser import DEFAULT_ENV, build_parser
from marllib_ext.cli.ray_setup import import_user_modules, set_threads
from marllib_ext.errors import ConfigError

__all__ = [
    "DEFAULT_ENV",
    "algorithm_table_markdown",
    "build_parser",
    "env_table_markdown",
    "main",
    "parse_assignments",
    "parse_grid",
]


def main(argv: list[str] | None = None) -> int:
    # Ray's deprecation chatter is not for end users of the CLI.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        import_user_modules(args.imports)
        if hasattr(args, "threads"):  # commands that run Ray
            print(set_threads(args.threads, getattr(args, "num_cpus", None)), flush=True)
        return args.func(args)
    except ConfigError as e:
        print(f"marllib-ext: error: {e}", file=sys.stderr)
        return 2
