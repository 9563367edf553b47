"""``marllib-ext report``: aggregate statistics of runs' evaluations (``marllib_ext.report``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_report(args: argparse.Namespace) -> int:
    from marllib_ext.report import find_metric_files, load_records, report_data, write_report

    files = find_metric_files(args.run_dirs)
    data = report_data(load_records(files), metric=args.metric, normalize=args.normalize)
    write_report(data, Path(args.out), reps=args.reps, seed=args.seed)
    print(f"{len(files)} record file(s), {len(data.tasks)} task(s), algorithms {data.algorithms}")
    print(f"wrote {Path(args.out) / 'report.md'} and its plots")
    return 0
