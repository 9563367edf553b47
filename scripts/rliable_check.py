"""``ops.statistics`` against rliable on the same scores (point estimates and 95%
stratified-bootstrap intervals). rliable's ``arch`` dependency does not import with
pandas 3, so run this in an environment of its own::

    python -m venv /tmp/rlvenv && /tmp/rlvenv/bin/pip install "pandas<3" rliable==1.2.0
    /tmp/rlvenv/bin/python scripts/rliable_check.py

It loads ``marllib_ext/ops/statistics.py`` by path (numpy only, no package install).
"""

import importlib.util
from pathlib import Path

import numpy as np
from rliable import library as rly
from rliable import metrics

path = Path(__file__).resolve().parents[1] / "marllib_ext" / "ops" / "statistics.py"
spec = importlib.util.spec_from_file_location("statistics", path)
st = importlib.util.module_from_spec(spec)
spec.loader.exec_module(st)

rng = np.random.default_rng(3)
x, y = rng.random((6, 3)), rng.random((6, 3))
print("| statistic | ops.statistics | rliable |")
print("|---|---|---|")
for name, ours, theirs in [
    ("IQM", st.iqm(x), metrics.aggregate_iqm(x)),
    ("median", st.median(x), metrics.aggregate_median(x)),
    ("mean", st.mean(x), metrics.aggregate_mean(x)),
    ("optimality gap", st.optimality_gap(x), metrics.aggregate_optimality_gap(x)),
    ("P(X > Y)", st.probability_of_improvement(x, y), metrics.probability_of_improvement(x, y)),
]:
    print(f"| {name} | {ours:.6f} | {theirs:.6f} |")
_, intervals = rly.get_interval_estimates(
    {"x": x}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=20000
)
low, high = st.interval(st.iqm, x, reps=20000)[1:]
print(f"| IQM 95% interval | [{low:.3f}, {high:.3f}] | {np.round(intervals['x'][:, 0], 3)} |")
_, intervals = rly.get_interval_estimates(
    {"xy": (x, y)}, lambda a, b: np.array([metrics.probability_of_improvement(a, b)]), reps=5000
)
low, high = st.interval(st.probability_of_improvement, x, y, reps=5000)[1:]
print(f"| P(X > Y) 95% interval | [{low:.3f}, {high:.3f}] | {np.round(intervals['xy'][:, 0], 3)} |")
