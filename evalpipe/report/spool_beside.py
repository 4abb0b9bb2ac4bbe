"""The sample browser's texts (the runs' spools) made by a forked child while the report reads the records.

Why: at 94,000 NCBI samples, reading the runs took ~5.6 s of the report's ~9 s, and ~2 s of that was
making each record's browser texts (:class:`~evalpipe.report.browser_spool.BrowserSpool`: the inputs
as the page's JSON, the marked entities, the gold and prediction texts) — work only the sample
browser needs, done on one core while the other idled (issue 28). So before the records are read
the report forks (:func:`start`): the child reads the last :data:`CHILD_SHARE` of each run's
samples file itself and makes each reference record's texts exactly as the report's own pass would
have (:func:`evalpipe.report.runs.spool_run`, the same span reading and the same maker of texts),
into a temporary file per run, keyed by the byte offset of the record's line, with the index in a
second file; the parent makes the texts of the first lines' records in its own pass (the child
costs more per record: it decodes and classifies them too, so the two finish together), and once
done waits for the child and adopts its spools (:meth:`SpoolBeside.spools`) as the rest of its own
(``BrowserSpool.rest``), asked through each record's line offset
(:meth:`evalpipe.report.reading.RecordLines.offset`).

The page is the same either way: a spool is a shortcut to the very rows made from each record read
whole again (:mod:`evalpipe.report.browser_spool`), and a child that did not finish (killed, an
exception, no fork to be had) leaves the runs with no spool — the rows are then made from the
records read whole, slower. ``EVALPIPE_REPORT_SPOOL_BESIDE`` ``0`` never forks (the texts are made
in the report's own pass, as before), ``1`` whenever a fork exists (the tests), unset or ``auto``
by :func:`evalpipe.forking.fork_wanted`'s rules (Linux, one thread, two cores, a core idle now, at
least :data:`MINIMUM` bytes of samples).
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from evalpipe.forking import fork_child, fork_wanted, kill
from evalpipe.forking import reaped as _reaped  # this module's own name: the tests record its children's exits
from evalpipe.report.browser_spool import BrowserSpool

__all__ = ["CHILD_SHARE", "ENV", "MINIMUM", "SpoolBeside", "first_child_line", "start"]

ENV = "EVALPIPE_REPORT_SPOOL_BESIDE"
#: bytes of samples files below which the texts are made in the report's own pass (~5,000 NCBI records)
MINIMUM = 8 << 20
#: how much of a core must be idle when the report would fork (on a busy machine it only takes turns)
IDLE_NEEDED = 0.5
#: the share of each run's lines whose texts the child makes (the last ones); the report's own pass
#: makes the first ones': at 94,000 NCBI samples the pass alone reads in ~3.6 s and a record's texts
#: cost it ~20 µs, the child ~50 µs a record for all of it (decoding, spans, texts), so the two
#: finish together near 0.8 (bench/memory.py)
CHILD_SHARE = 0.9


def first_child_line(lines: int) -> int:
    """The first of a run's ``lines`` (non-blank, in order) whose texts the child makes."""
    return lines - round(lines * CHILD_SHARE)

#: one run's spooling: fills the spool it is given (:func:`evalpipe.report.runs.spool_run`)
Job = Callable[[BrowserSpool], None]
#: how a held record of a run is asked for its texts (its line's offset), None for a run that asks none
Key = Callable[[Mapping[str, Any]], int | None]


@dataclass
class SpoolBeside:
    """The parent's side of the child making the runs' spools (see the module docstring)."""

    pid: int | None
    #: per run: the file of its texts and the file of their index
    files: list[tuple[IO[bytes], IO[bytes]]]

    def spools(self, keys: Sequence[Key | None]) -> list[BrowserSpool | None]:
        """Each run's spool once the child has exited well (None for a run whose key is None); every
        run None where it did not. Waits for the child."""
        status = _reaped(self.pid) if self.pid is not None else None
        self.pid = None
        files, self.files = self.files, []
        if status != 0:
            for data, index in files:
                data.close()
                index.close()
            return [None] * len(keys)
        out: list[BrowserSpool | None] = []
        for (data, index), key in zip(files, keys, strict=True):
            index.seek(0)
            at = pickle.load(index)
            index.close()
            if key is None:
                data.close()
                out.append(None)
            else:
                out.append(BrowserSpool.adopt(data, at, key))
        return out

    def close(self) -> None:
        """The child stopped (where it still runs: the report failed first) and reaped; its files closed."""
        if self.pid is not None:
            kill(self.pid)
            _reaped(self.pid)
            self.pid = None
        for data, index in self.files:
            data.close()
            index.close()
        self.files = []


def start(jobs: Sequence[Job], work: int) -> SpoolBeside | None:
    """A :class:`SpoolBeside` whose child is already running ``jobs`` (one per run, in order), where
    a fork is wanted for ``work`` bytes of samples (see the module docstring); else None: the report
    makes the texts in its own pass."""
    if not jobs or not fork_wanted(ENV, work, MINIMUM, idle_needed=IDLE_NEEDED):
        return None
    files: list[tuple[IO[bytes], IO[bytes]]] = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in jobs]

    def spool() -> None:  # in the child
        for job, (data, index) in zip(jobs, files):
            made = BrowserSpool(data)
            job(made)
            pickle.dump(made.packed_index(), index, protocol=pickle.HIGHEST_PROTOCOL)
            index.flush()

    pid = fork_child(spool)
    if pid is None:  # no fork to be had: the texts are made in the report's pass
        for data, index in files:
            data.close()
            index.close()
        return None
    return SpoolBeside(pid, files)
