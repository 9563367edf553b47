"""Per-algorithm progress columns (``progress.csv`` and the progress line)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProgressColumn:
    """One column: ``name`` in ``progress.csv``, ``label`` and ``fmt`` on the line."""

    name: str
    label: str
    fmt: str = ".3f"


def read_number(result: Mapping[str, Any], *path: str) -> float:
    """``result[path[0]][path[1]]...`` as a float; NaN where any key is missing."""
    value: Any = result
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return math.nan
        value = value[key]
    return float(value)
