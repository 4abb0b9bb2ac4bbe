"""The sample browser's HTML written by a forked child while the report makes everything else.

Why: at 94,000 NCBI samples, writing the browser (its rows and their JSON, ~90 MB) took ~2.5 s of
the report's ~10 s, all in one process on a machine with two or more cores; the bootstraps, the
frame-based sections, report.md and leaderboard.csv do not depend on it (issue 28). So once the
runs are read, the report forks (:func:`start`): the child has the very records and spools the
parent read (copy-on-write), writes the browser's section, piece by piece as UTF-8, into a
temporary file and exits; the parent goes on, and when report.html reaches the browser it waits for
the child and copies the file into the page (:meth:`Beside.pieces`).

The page is the same either way: the child writes what the parent would (the same function, on the
same objects, encoded by :func:`evalpipe.report.html.utf8` as :func:`~evalpipe.report.html.write_html`
encodes it), and the parent decodes the file's valid UTF-8 to hand it to the writer, which encodes
it back to the same bytes. Where the child did not finish (killed, an exception — e.g. a sample
the browser refuses, raised again in the parent —, no fork to be had) the parent makes the browser
itself, as it does when no fork is wanted: ``EVALPIPE_REPORT_BESIDE`` ``0`` never, ``1`` whenever
a fork exists (the tests), unset or ``auto`` by :func:`evalpipe.forking.fork_wanted`'s
rules (Linux, one thread, two cores, a core idle now, at least :data:`MINIMUM` rows).

The parent's own work after the fork is shorter than the child's rows (at 94,000 NCBI samples
~1.4 s against ~1.7 s), and it used to wait idle for the rest. So where the browser can be made in two parts
(``start``'s ``parts``: :func:`evalpipe.report.browser.iter_sample_browser`'s ``rows``), the child
writes the first :data:`CHILD_SHARE` of the rows and the parent, once report.html reaches the
browser, writes the rest into a file of its own while the child may still be writing, then copies
the child's file and its own into the page. The rows read their spooled texts at their offsets
(:class:`~evalpipe.report.browser_spool.BrowserSpool` never moves the shared file position), so the
two processes reading one spool file do not disturb each other. Rows made of the texts the runs'
extracts wrote (:mod:`evalpipe.report.browser_written`, ~1.1 s at 94,000 NCBI samples, and reading
no record of the parent's) are all the child's: the report passes no ``parts`` then.
"""

from __future__ import annotations

import codecs
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO

from evalpipe.forking import fork_child, fork_wanted, kill
from evalpipe.forking import reaped as _reaped  # this module's own name: the tests record its children's exits
from evalpipe.report.html import utf8

__all__ = ["ENV", "MINIMUM", "Beside", "start"]

ENV = "EVALPIPE_REPORT_BESIDE"
#: rows below which the browser is written in-process (a fork costs more than a small page)
MINIMUM = 5000
#: how much of a core must be idle when the report would fork (on a busy machine it only takes turns)
IDLE_NEEDED = 0.5
#: the share of the rows the child writes when the parent writes the rest (:func:`start`'s ``parts``):
#: the parent has ~1.0 s of other work after the fork at 94,000 NCBI samples (the bootstraps and the
#: sections; its frames are made before it), the rows ~1.7 s in all (see bench/memory.py), so the
#: two finish together near 0.8
CHILD_SHARE = 0.8
#: bytes of the child's file read at a time
CHUNK = 1 << 20

Pieces = Callable[[], Iterable[str]]


@dataclass
class Beside:
    """The parent's side of the child writing the browser (see the module docstring).

    ``rest``: the pieces that follow ``make``'s, which the parent makes itself when the browser is
    asked for — into a file of its own while the child may still be writing, so the two cores share
    the rows —, and puts after the child's (or, the child failing, after ``make``'s, made then)."""

    make: Pieces
    pid: int | None
    out: IO[bytes] | None
    rest: Pieces | None = None

    def pieces(self) -> Iterator[str]:
        """The browser's HTML: the child's, once it has exited well; else made here, by ``make``;
        then ``rest``'s."""
        own, failed = None, None
        if self.rest is not None and self.pid is not None:
            own = tempfile.TemporaryFile()
            try:
                for piece in self.rest():
                    own.write(utf8(piece))
            except Exception as exc:  # raised after the pieces before it, as a parent alone would
                failed = exc
        try:
            out = self._finished()
            if out is None:
                yield from self.make()
            else:
                self.out = None
                yield from _decoded(out)
            if failed is not None:
                raise failed
            if own is not None:
                yield from _decoded(own)
                own = None
            elif self.rest is not None:
                yield from self.rest()
        finally:
            if own is not None:
                own.close()

    def _finished(self) -> IO[bytes] | None:
        """The child's file when it exited with 0, else None (and the file closed); the child reaped."""
        pid, out, self.pid = self.pid, self.out, None
        if pid is None or out is None:
            return None
        status = _reaped(pid)
        if status == 0:
            return out
        out.close()
        self.out = None
        return None

    def close(self) -> None:
        """Stop a child still running (the report failed before the browser), reap it, drop its file."""
        if self.pid is not None:
            kill(self.pid)
            _reaped(self.pid)
            self.pid = None
        if self.out is not None:
            self.out.close()
            self.out = None


def _decoded(out: IO[bytes]) -> Iterator[str]:
    """The text of a file of UTF-8 pieces (valid UTF-8 as a whole), a chunk at a time; the file closed after."""
    try:
        out.seek(0)
        decoder = codecs.getincrementaldecoder("utf-8")()
        while chunk := out.read(CHUNK):
            yield decoder.decode(chunk)
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail
    finally:
        out.close()


def start(make: Pieces, rows: int, parts: Callable[[int], tuple[Pieces, Pieces]] | None = None) -> Beside:
    """A :class:`Beside` whose child is already writing ``make()``'s pieces, where a fork is wanted
    (see the module docstring); else one that makes them when asked.

    ``parts``: ``make`` as two consecutive parts, the first of the given rows and the rest (their
    pieces joined are ``make``'s): the child then writes the first :data:`CHILD_SHARE` of the rows,
    and the parent the rest when the browser is asked for (:attr:`Beside.rest`)."""
    if not fork_wanted(ENV, rows, MINIMUM, idle_needed=IDLE_NEEDED):
        return Beside(make, None, None)
    rest = None
    if parts is not None:
        make, rest = parts(min(max(round(rows * CHILD_SHARE), 1), rows - 1))  # neither part empty
    out = tempfile.TemporaryFile()

    def write() -> None:  # in the child
        for piece in make():
            out.write(utf8(piece))
        out.flush()

    pid = fork_child(write)
    if pid is None:  # no fork to be had: written here
        out.close()
        return Beside(make, None, None, rest)
    return Beside(make, pid, out, rest)
