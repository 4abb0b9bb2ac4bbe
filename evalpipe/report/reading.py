"""How the report reads a run's ``samples.jsonl``: once, each record whole for a moment, then held lean.

Every part of the report reads the records, but each reads only a few of their fields, and at
94,000 NCBI samples what the records held was most of the report's memory (issue 28). So as each
record streams in it is whole just long enough for what needs it whole (a ``whole`` callback:
the span outcomes, the sample browser's texts, the frame's values, the answers' digests; see
:mod:`evalpipe.report.runs`), and then only what the readers of *every* record use is held:

* :data:`UNREAD_FIELDS` no part of the report reads (the prompt older runs repeated, the request key);
* :data:`ON_DEMAND_FIELDS`, the bulky fields only a few readers need for a few records (inputs,
  gold, reasoning, the data file's position): those read the record's line again
  (:class:`RecordLines`);
* :data:`LEAN_FIELDS`, what the ``whole`` callback has already turned into what its readers use:
  the answer (its length is a frame column, its digest what a comparison tells apart, its text a
  browser row's), the prediction and the parse diagnostics (a browser row's), the usage, latency,
  finish reason and truncation (frame columns), and the request's bookkeeping (attempts, endpoint).

What is held: the task, id, condition, error, parse flag, scores, parts, judge and any field this
list does not name (a field a later evalpipe adds is held, not lost). Repeated values are shared
(:class:`~evalpipe.report.sharing._Sharing`).
"""

from __future__ import annotations

import json
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from evalpipe.report.sharing import _Sharing
from evalpipe.results import RunDir

__all__ = ["LEAN_FIELDS", "ON_DEMAND_FIELDS", "UNREAD_FIELDS", "RecordLines", "line_starts", "paired", "read_held", "read_records"]

#: record fields no part of the report reads (left out as records are read)
UNREAD_FIELDS = ("prompt", "key")
#: record fields held by no reader of every record: read again from the record's line by the few
#: that need them (the sample browser's rows, span outcomes and NER examples, disagreement examples)
ON_DEMAND_FIELDS = ("inputs", "gold", "meta", "reasoning")
#: record fields whose readers got what they use of them while the record was whole (see the docstring)
LEAN_FIELDS = ("answer", "prediction", "diagnostics", "usage", "latency_s", "finish_reason", "truncated_tokens",
               "attempts", "endpoint")


class RecordLines:
    """Where the line of each slim record is in a samples file, to read the record whole again.

    Keyed by the record's identity (``id``): the report's records live as long as their run, and
    a copy of one is not one of them (it reads as itself, unchanged). Positions are those of the
    file's non-blank lines, as :meth:`~evalpipe.results.RunDir.iter_samples` decodes them. Held as
    two arrays, the identities in order and each one's offset, searched by bisection: a dict of
    94,000 records was ~9 MB, in the report and in the browser child that reads it."""

    def __init__(self, path: Path, at: Iterable[tuple[int, int]]) -> None:
        """``at``: (a record's identity, its line's offset) of each record."""
        self.path = path
        items = sorted(at)
        self._ids = array("Q", [i for i, _ in items])
        self._offsets = array("q", [o for _, o in items])

    def offset(self, record: Mapping[str, Any]) -> int | None:
        """The byte offset of ``record``'s line (None: not one of these records)."""
        key = id(record)
        i = bisect_left(self._ids, key)
        return self._offsets[i] if i < len(self._ids) and self._ids[i] == key else None

    @contextmanager
    def reader(self) -> Iterator[Callable[[Mapping[str, Any]], Mapping[str, Any]]]:
        with self.path.open("rb") as handle:
            yield lambda record: self._full(handle, record)

    def _full(self, handle: BinaryIO, record: Mapping[str, Any]) -> Mapping[str, Any]:
        at = self.offset(record)
        if at is None:
            return record
        handle.seek(at)
        full = json.loads(handle.readline())
        if not isinstance(full, dict):
            return record
        for name in UNREAD_FIELDS:
            full.pop(name, None)
        return full


def line_starts(path: Path) -> list[int]:
    """The byte offset of each non-blank line of ``path`` (one record each)."""
    starts, at = [], 0
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                starts.append(at)
            at += len(line)
    return starts


def read_records(run_dir: RunDir, compat: str | None, slim: bool = False) -> tuple[list[dict[str, Any]], RecordLines | None]:
    """The records as the report holds them, read by one process.

    ``slim``: without :data:`ON_DEMAND_FIELDS` and :data:`LEAN_FIELDS`, with the :class:`RecordLines`
    that reads them again (:func:`paired`); else whole, and None."""
    if not slim:
        return read_held(run_dir, compat, False), None
    starts = line_starts(run_dir.samples_path(compat))
    return paired(run_dir, compat, read_held(run_dir, compat, True), starts)


def paired(run_dir: RunDir, compat: str | None, records: list[dict[str, Any]],
           starts: list[int]) -> tuple[list[dict[str, Any]], RecordLines | None]:
    """Slim ``records``, read in order from the samples file's lines at ``starts``, with the
    :class:`RecordLines` that reads them again — or, where lines and records do not pair up one to one
    (never for a file evalpipe wrote), the records read again whole, and None (what was taken of the
    slim ones while they were whole is then not to be used)."""
    if len(starts) != len(records):
        return read_records(run_dir, compat, slim=False)
    return records, RecordLines(run_dir.samples_path(compat), zip(map(id, records), starts))


def read_held(run_dir: RunDir, compat: str | None, slim: bool,
              whole: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
              start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
    """The records of the samples file's lines from byte offset ``start`` to ``stop`` (None: the
    end), as the report holds them (``slim``: see :func:`read_records`), without pairing them with
    their lines (:func:`paired`): the whole file, or a part of it read by one process
    (:mod:`evalpipe.report.read_beside`). ``whole`` sees each record whole and the record that is
    held for it (the very object: what is made of the one may be keyed by the other).

    The held record is a new dict of the fields kept, not the decoded one with fields popped: a
    dict keeps the table of its largest size, so a record of 6 fields popped from 16 would still
    cost the 16's."""
    dropped = frozenset((*UNREAD_FIELDS, *ON_DEMAND_FIELDS, *LEAN_FIELDS) if slim else UNREAD_FIELDS)
    records = []
    sharing = _Sharing()
    for record in run_dir.iter_samples(compat, start, stop):
        held = {name: value for name, value in record.items() if name not in dropped}
        if whole is not None:
            whole(record, held)
        records.append(sharing.record(held))
    return records
