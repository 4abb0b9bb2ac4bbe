"""The last part of each run's samples file read by a forked child while the report reads the first.

Why: at 94,000 NCBI samples, reading the runs took ~5.6 s of the report's ~9 s, on both cores:
each record is decoded and taken apart as it streams in (:class:`evalpipe.report.runs._WhileWhole`:
the held slim record, the frame's values, the answer's digest, the parts, the span outcomes and
the sample browser's texts), ~90 µs of Python a record (issue 28). A child that made only the
browser's texts of the last lines (this module's first form) still left the report decoding and
classifying every record itself, and the child doing the same again for its lines. What the
report takes of a record is small once taken (47,000 slim records pickle into ~3 MB in 0.03 s),
so the records are now read once, by one of two processes:

* before reading, the report forks (:func:`start`); the child reads each run's last
  :data:`CHILD_SHARE` of lines (from :func:`first_child_line` on) and takes of each record exactly
  what the report's own pass takes (the same :class:`~evalpipe.report.runs._WhileWhole`), its
  browser texts into a temporary file per run (:class:`~evalpipe.report.browser_spool.BrowserSpool`,
  keyed by the byte offset of the record's line) and the rest into a second file (a pickle);
* the report reads each run's first lines meanwhile, waits for the child, and adopts what it took
  (:meth:`ReadBeside.results`): its records after the report's own, its frame values, digests,
  parts and span outcomes after the report's own, its spool as the rest of the report's
  (``BrowserSpool.rest``).

The run is the same either way: the records, frames, intervals and pages are those of one pass
over the whole file (``tests/report/test_read_beside.py``). Where the child did not finish (killed,
an exception — a damaged line among its lines, say —, no fork to be had), or where its part and the
report's do not add up to the file's lines, the report reads that run again whole itself, from its
first line: an error then names the line as it would have without a child.

A run read from its extract (:mod:`evalpipe.report.extract`) has no line to read: the child reads
the others' only, and none is forked where every run has one.

``EVALPIPE_REPORT_READ_BESIDE`` ``0`` never forks, ``1`` whenever a fork exists (the tests), unset
or ``auto`` by :func:`evalpipe.forking.fork_wanted`'s rules (Linux, one thread, two cores, a core
idle now, at least :data:`MINIMUM` bytes of samples).
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from evalpipe.forking import fork_child, fork_wanted, kill
from evalpipe.forking import reaped as _reaped  # this module's own name: the tests record its children's exits
from evalpipe.report.browser_spool import BrowserSpool

__all__ = ["CHILD_SHARE", "ENV", "MINIMUM", "ReadBeside", "first_child_line", "start", "wanted"]

ENV = "EVALPIPE_REPORT_READ_BESIDE"
#: bytes of samples files below which the report reads alone (~5,000 NCBI records)
MINIMUM = 8 << 20
#: how much of a core must be idle when the report would fork (on a busy machine it only takes turns)
IDLE_NEEDED = 0.5
#: the share of each run's lines the child reads (the last ones): both processes take the same of
#: a record; the child pickles what it took (~1 µs a record) and starts later (the fork), the
#: report adopts it (~1 µs a record) — so about half each (bench/memory.py, sixth round)
CHILD_SHARE = 0.5


def first_child_line(lines: int) -> int:
    """The first of a run's ``lines`` (non-blank, in order) that the child reads."""
    return lines - round(lines * CHILD_SHARE)


#: one run's reading of its last lines (in the child): given the spool for their browser texts
#: (None: the report makes none), returns what it took of them (pickled back to the report)
Job = Callable[[BrowserSpool | None], Any]


def wanted(work: int) -> bool:
    """Whether the report should read beside a child for ``work`` bytes of samples files (see the
    module docstring; a fork may still fail: :func:`start` then returns None)."""
    return fork_wanted(ENV, work, MINIMUM, idle_needed=IDLE_NEEDED)


@dataclass
class ReadBeside:
    """The report's side of the child reading the runs' last lines (see the module docstring)."""

    pid: int | None
    #: per run: the file of its browser texts and the file of what was taken
    files: list[tuple[IO[bytes], IO[bytes]]]

    def results(self) -> list[tuple[Any, BrowserSpool | None] | None]:
        """Per run, what the child took of its last lines and their spool (None without texts; its
        ``key`` to be set), once the child exited well; every run None where it did not. Waits
        for the child."""
        status = _reaped(self.pid) if self.pid is not None else None
        self.pid = None
        files, self.files = self.files, []
        out: list[tuple[Any, BrowserSpool | None] | None] = []
        for data, taken in files:
            if status != 0:
                data.close()
                taken.close()
                out.append(None)
                continue
            taken.seek(0)
            what, index = pickle.load(taken)
            taken.close()
            if index is None:
                data.close()
                out.append((what, None))
            else:
                out.append((what, BrowserSpool.adopt(data, index, None)))
        return out

    def close(self) -> None:
        """The child stopped (where it still runs: the report failed first) and reaped; its files closed."""
        if self.pid is not None:
            kill(self.pid)
            _reaped(self.pid)
            self.pid = None
        for data, taken in self.files:
            data.close()
            taken.close()
        self.files = []


def start(jobs: Sequence[Job], spooled: bool) -> ReadBeside | None:
    """A :class:`ReadBeside` whose child is already running ``jobs`` (one per run, in order; with a
    spool for each where ``spooled``); None where no fork was to be had: the report reads alone.
    Call only where :func:`wanted`."""
    if not jobs:
        return None
    files: list[tuple[IO[bytes], IO[bytes]]] = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in jobs]

    def read() -> None:  # in the child
        for job, (data, taken) in zip(jobs, files):
            spool = BrowserSpool(data) if spooled else None
            what = job(spool)
            pickle.dump((what, spool.packed_index() if spool is not None else None), taken,
                        protocol=pickle.HIGHEST_PROTOCOL)
            taken.flush()

    pid = fork_child(read)
    if pid is None:
        for data, taken in files:
            data.close()
            taken.close()
        return None
    return ReadBeside(pid, files)
