"""The report's frame of its samples (``ReportRun.samples``), made a column at a time.

The very frame :func:`evalpipe.frames.samples_frame` makes of the same records and columns (same
columns in the same order, same dtypes, same values: ``tests/report/test_report_frame.py``), made
so that at most one fixed column is a list of Python values at a time: ``samples_frame`` holds
every column as a list until pandas reads them all, and then the frame once more while it orders
its columns — at 94,000 NCBI samples ~50 MB above what the frame holds, at the moment the report's
memory was at its highest (issue 28); made here, ~15 MB. The score columns are filled straight
into float arrays.

The report holds its records lean (:mod:`evalpipe.report.reading`: no answer, usage, latency …), so
the fixed columns' values are taken from each record while it is whole, as it is read
(:class:`FrameValues`: each column's list, the very values ``samples_frame`` reads), and the frame
is made from them; the condition and score columns from the records, which hold those.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from evalpipe.frames import _FIXED_COLUMNS, _READERS, CONDITION_COLUMNS, SCORE_PREFIX, samples_frame

if TYPE_CHECKING:  # imported where a frame is made: a run writing its extract takes frame values only
    import numpy as np
    import pandas as pd

__all__ = ["FrameValues", "answer_digest", "report_frame"]

#: the fixed columns that are the run's, not a record's
_RUN_COLUMNS = ("run", "model", "compat")


class FrameValues:
    """The fixed columns' values of records, taken one record at a time while it is whole.

    Each column's values are :data:`evalpipe.frames._READERS`' of the record — what
    :func:`~evalpipe.frames.samples_frame` reads — in the order the records are added, which is the
    order of the records the frame is then made of (:func:`report_frame`)."""

    def __init__(self, columns: Collection[str]) -> None:
        self.columns = tuple(c for c in _FIXED_COLUMNS if c in columns and c not in _RUN_COLUMNS)
        self._values: dict[str, list[Any]] = {c: [] for c in self.columns}
        self._readers = tuple((self._values[c].append, _READERS[c]) for c in self.columns)
        self.count = 0

    def add(self, record: Mapping[str, Any]) -> None:
        for append, read in self._readers:
            append(read(record))
        self.count += 1

    def column(self, name: str) -> list[Any]:
        return self._values[name]

    def state(self) -> dict[str, list[Any]]:
        """Each column's values (to send to another process: :meth:`extend` takes them)."""
        return self._values

    def extend(self, later: Mapping[str, list[Any]]) -> None:
        """The values of the records after these (another :meth:`state`, of the same columns), added in order."""
        counts = {len(values) for values in later.values()}
        if set(later) != set(self.columns) or len(counts) > 1:
            raise ValueError(f"frame values of columns {sorted(later)} for {sorted(self.columns)}")
        for column in self.columns:
            self._values[column].extend(later[column])
        self.count += counts.pop() if counts else 0


def answer_digest(answer: Any) -> bytes | None:
    """What tells two answers apart (equal digests: equal answers) without holding their texts: a
    128-bit BLAKE2b of the answer's UTF-8 (a lone surrogate kept as it is); None for no text answer,
    which is how a comparison reads one (``None`` and a non-string answer are the same to it)."""
    if not isinstance(answer, str):
        return None
    return hashlib.blake2b(answer.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def report_frame(records: Sequence[Mapping[str, Any]], identity: Mapping[str, Any], compat: str | None,
                 columns: Collection[str], values: FrameValues | None = None) -> pd.DataFrame:
    """``samples_frame(records, identity, compat, columns=columns)``, built column by column; the fixed
    columns from ``values`` where given (taken from the same records, whole: they may be lean now)."""
    import pandas as pd

    if not records:
        return samples_frame(records, identity, compat, columns=columns)
    if values is not None and values.count != len(records):
        raise ValueError(f"frame values of {values.count} records for {len(records)} records")
    wanted = [c for c in _FIXED_COLUMNS if c in columns]
    run_values = {"run": identity["run"], "model": identity["model"], "compat": compat or "default"}
    data: dict[str, Any] = {}
    first = [c for c in _FIXED_COLUMNS[:5] if c in wanted]
    rest = [c for c in _FIXED_COLUMNS[5:] if c in wanted]
    for column in first:
        data[column] = _fixed(column, records, run_values, values)
    if any("condition" in r for r in records):  # missing (NaN) in a record without a condition
        nan = float("nan")
        for column in CONDITION_COLUMNS:
            if column in columns:
                data[column] = pd.Series([r.get(column) if "condition" in r else nan for r in records])
    for column in rest:
        data[column] = _fixed(column, records, run_values, values)
    scores = _score_columns(records)
    data.update((SCORE_PREFIX + name, scores[name]) for name in sorted(scores))
    return pd.DataFrame(data)


def _fixed(column: str, records: Sequence[Mapping[str, Any]], run_values: Mapping[str, Any],
           values: FrameValues | None) -> pd.Series:
    """One fixed column, as pandas reads a list of its values (the list dropped once read)."""
    import pandas as pd

    if column in run_values:
        return pd.Series([run_values[column]] * len(records))
    if values is not None and column in values.columns:
        return pd.Series(values.column(column))
    return pd.Series(list(map(_READERS[column], records)))


def _score_columns(records: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Each numeric per-sample score as a float column, NaN where a record lacks it."""
    import numpy as np

    scores: dict[str, np.ndarray] = {}
    for i, record in enumerate(records):
        for name, value in (record.get("scores") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                column = scores.get(name)
                if column is None:
                    column = scores[name] = np.full(len(records), np.nan)
                column[i] = float(value)
    return scores
