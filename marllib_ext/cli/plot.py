"""``marllib-ext plot``: learning curves of run directories."""

from __future__ import annotations

import argparse


def cmd_plot(args: argparse.Namespace) -> int:
    from marllib_ext.plotting import plot_runs

    out = plot_runs(
        args.run_dirs,
        args.out,
        metric=args.metric,
        title=args.title,
        smooth_steps=args.smooth_steps,
    )
    print(f"wrote {out}")
    return 0
