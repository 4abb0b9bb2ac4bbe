"""The report's frame of its samples (``ReportRun.samples``), made a column at a time.

The very frame :func:`evalpipe.frames.samples_frame` makes of the same records and columns (same
columns in the same order, same dtypes, same values: ``tests/report/test_report_frame.py``), made
so that at most one fixed column is a list of Python values at a time: ``samples_frame`` holds
every column as a list until pandas reads them all, and then the frame once more while it orders
its columns — at 94,000 NCBI samples ~50 MB above what the frame holds, at the moment the report's
memory was at its highest (issue 28); made here, ~15 MB. The score columns are filled straight
into float arrays.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from evalpipe.frames import _FIXED_COLUMNS, _READERS, CONDITION_COLUMNS, SCORE_PREFIX, samples_frame

__all__ = ["report_frame"]


def report_frame(records: Sequence[Mapping[str, Any]], identity: Mapping[str, Any], compat: str | None,
                 columns: Collection[str]) -> pd.DataFrame:
    """``samples_frame(records, identity, compat, columns=columns)``, built column by column."""
    if not records:
        return samples_frame(records, identity, compat, columns=columns)
    wanted = [c for c in _FIXED_COLUMNS if c in columns]
    run_values = {"run": identity["run"], "model": identity["model"], "compat": compat or "default"}
    data: dict[str, Any] = {}
    first = [c for c in _FIXED_COLUMNS[:5] if c in wanted]
    rest = [c for c in _FIXED_COLUMNS[5:] if c in wanted]
    for column in first:
        data[column] = _fixed(column, records, run_values)
    if any("condition" in r for r in records):  # missing (NaN) in a record without a condition
        nan = float("nan")
        for column in CONDITION_COLUMNS:
            if column in columns:
                data[column] = pd.Series([r.get(column) if "condition" in r else nan for r in records])
    for column in rest:
        data[column] = _fixed(column, records, run_values)
    scores = _score_columns(records)
    data.update((SCORE_PREFIX + name, scores[name]) for name in sorted(scores))
    return pd.DataFrame(data)


def _fixed(column: str, records: Sequence[Mapping[str, Any]], run_values: Mapping[str, Any]) -> pd.Series:
    """One fixed column, as pandas reads a list of its values (the list dropped once read)."""
    if column in run_values:
        return pd.Series([run_values[column]] * len(records))
    return pd.Series(list(map(_READERS[column], records)))


def _score_columns(records: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Each numeric per-sample score as a float column, NaN where a record lacks it."""
    scores: dict[str, np.ndarray] = {}
    for i, record in enumerate(records):
        for name, value in (record.get("scores") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                column = scores.get(name)
                if column is None:
                    column = scores[name] = np.full(len(records), np.nan)
                column[i] = float(value)
    return scores
