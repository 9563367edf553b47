"""``marllib-ext plot``: learning curves of run directories."""

from __future__ import annotations

import argparse


def cmd_plot(args: argparse.Namespace) -> int:
    from marllib_ext.plotting import plot_runs

    print(f"wrote {plot_runs(args.run_dirs, args.out, metric=args.metric, title=args.title)}")
    return 0
