"""Render a large plan in two processes: a forked child takes blocks of examples the run has not.

Why: rendering happens before any request (a template or data error costs nothing), so while a
large plan renders the run has nothing else to do — and one core of the machine idles. Rendering is
Python (Jinja, the JSON of each prompt, its cache key) and holds the GIL, so a second thread would
not help; a forked child does. The plan is still staged by the run alone, in evaluation order, in
one transaction (:meth:`evalpipe.pipeline.stage.PlanStage.write`): the child only sends rows back.

**Who renders what.** The run renders the first :data:`START` examples alone (a plan smaller than
that never forks), then forks a child that reads the examples again (a stream opens its file anew:
the run's own reading is not shared). From there the examples are cut into blocks of :data:`BLOCK`,
and each block is claimed once, by whichever process comes to it first, through a counter they
share (the next block nobody has claimed): the child claims the next free block, reads up to it,
renders it and sends its rows; the run reads every example in order (``watch`` sees each, as
before), and a block it reaches unclaimed it claims and renders itself, while the child's blocks
wait, examples held, until their rows come. The run never waits for the child: it holds at most
:data:`AHEAD` blocks waiting, and beyond that (and at the end) renders the oldest itself, the
child's late rows for it dropped; so a child starved of CPU costs the run almost nothing. A child
ahead of the run sends rows for blocks the run has not read yet: the run holds them (at most
:data:`ARRIVED` blocks; beyond, the child's sending waits) until it reads the block. The pipe's
buffer is widened (:data:`PIPE_BYTES`) so that the child's sending need not wait for the run to
read a block: at 94,000 NCBI sentences, with the 64 KB default and those rows dropped, the child
rendered a quarter of the blocks and the whole preparation took x0.87 of rendering alone; now it
renders over half, and preparation takes x0.66-0.72.

**Same rows.** A prompt is a deterministic function of its example (``make_prompt``'s contract),
so the child's rows are the ones the run would make; each carries its sample id, checked against
the run's example, and comes with the shared texts its packing added
(:class:`~evalpipe.store.prompt_pack.Packer` learns a text when a prompt first refers to it; the
run's packer must hold them all). If the child stops early — its rendering raised (a template error
at sample 40,000), it died, or an id does not match — the run renders the child's blocks itself:
an error is then raised by the run, at the same sample and with the same message as without one.

``EVALPIPE_RENDER_BESIDE=0`` never forks, ``=1`` whenever a fork is possible (the tests); the
rules otherwise are :mod:`evalpipe.forking`'s.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from evalpipe import forking
from evalpipe.forking import fork_wanted
from evalpipe.records import Example

ENV = "EVALPIPE_RENDER_BESIDE"
#: examples the run renders alone before it forks (a multiple of BLOCK)
START = 1024
#: examples per block (one message of the pipe: some hundred KB of rows)
BLOCK = 256
#: the child's blocks the run holds, waiting for their rows, before it renders the oldest itself
AHEAD = 8
#: rows of blocks the run has not read yet that it takes off the pipe and holds (beyond them the
#: child's sending waits: the run holds at most this many blocks' rows ahead of its reading)
ARRIVED = 32
#: the pipe's buffer the run asks for (Linux ``F_SETPIPE_SZ``; a block's rows are some ten KB):
#: with the default 64 KB the child waited on its sending for a third of its time (measured at
#: 94,000 NCBI sentences: 2.5 of 7.6 s), the run taking its messages only once per block read
PIPE_BYTES = 1 << 20

#: how much of a core must be idle when the run would fork (evalpipe.forking)
IDLE_NEEDED = 0.7

#: an example's rendered row: (cache key, packed prompt JSON)
RenderRow = Callable[[Example], tuple[str, str]]
#: a rendered example as the run yields it: the example, its key, its packed prompt
Rendered = tuple[Example, str, str]


def rendered(examples: Iterable[Example], render: RenderRow, texts: MutableMapping[str, str],
             watch: Callable[[Example], None] | None = None) -> Iterator[Rendered]:
    """Every example with its rendered row, in order; ``texts`` (the packer's shared texts, which
    ``render`` may add to) gets the child's additions too. ``watch`` sees each example first."""
    reading = iter(examples)
    yield from _alone(itertools.islice(reading, START), render, watch)
    following = next(reading, None)
    if following is None:  # a small plan: rendered alone
        return
    reading = itertools.chain((following,), reading)
    # a fork only for examples that can be read again (a stream re-opens its file; an iterator read in
    # the child would move the run's own reading)
    helper = None
    if iter(examples) is not examples and fork_wanted(ENV, 1, 0, idle_needed=IDLE_NEEDED):
        with contextlib.suppress(OSError):  # no fork to be had (a process limit, memory): rendered alone
            helper = _Helper.start(examples, render, texts)
    if helper is None:
        yield from _alone(reading, render, watch)
        return
    try:
        yield from helper.run(reading, watch)
    finally:
        helper.stop()


def _alone(examples: Iterable[Example], render: RenderRow,
           watch: Callable[[Example], None] | None) -> Iterator[Rendered]:
    for example in examples:
        if watch is not None:
            watch(example)
        yield (example, *render(example))


@dataclass
class _Waiting:
    """A block the child claimed: its examples, held until its rows come (or the run renders it)."""

    index: int
    examples: list[Example]
    rows: list[tuple[str, str, str]] | None = None


@dataclass
class _Helper:
    """The run's side of the child (see the module docstring)."""

    process: Any
    conn: Connection
    #: the next block nobody has claimed (shared with the child, under its lock)
    free: Any
    render: RenderRow
    texts: MutableMapping[str, str]
    waiting: deque[_Waiting] = field(default_factory=deque)
    #: rows the child sent for blocks the run has not read yet, by block
    arrived: dict[int, list[tuple[str, str, str]]] = field(default_factory=dict)
    #: the first block the run has not read (rows for an earlier block it does not hold are late: dropped)
    reading_at: int = field(default_factory=lambda: START // BLOCK)
    alive: bool = True

    @classmethod
    def start(cls, examples: Iterable[Example], render: RenderRow, texts: MutableMapping[str, str]) -> _Helper:
        context = multiprocessing.get_context("fork")
        free = context.Value("q", START // BLOCK)
        ours, theirs = context.Pipe(duplex=False)
        _widen(theirs)
        process = context.Process(target=_child_main, args=(theirs, examples, render, texts, free),
                                  name="evalpipe-render-beside", daemon=True)
        process.start()
        theirs.close()
        return cls(process, ours, free, render, texts)

    def run(self, reading: Iterator[Example], watch: Callable[[Example], None] | None) -> Iterator[Rendered]:
        """The examples after START, read in blocks: each block claimed and rendered, or held for
        the child's rows; yielded in order as the blocks at the head are done."""
        for index in itertools.count(START // BLOCK):
            block = list(itertools.islice(reading, BLOCK))
            if not block:
                break
            if watch is not None:
                for example in block:
                    watch(example)
            self.reading_at = index
            self._drain()  # rows for this block or a later one are held in ``arrived``
            self.reading_at = index + 1
            if not self._claim(index):
                waiting = _Waiting(index, block)
                self._given(waiting, self.arrived.pop(index, None))
                self.waiting.append(waiting)
            elif not self.waiting:
                yield from ((e, k, p) for e, (_, k, p) in zip(block, self._rows(block)))
                continue
            else:
                self.waiting.append(_Waiting(index, block, self._rows_in_order(block)))
            yield from self._done(limit=AHEAD)
        yield from self._done(limit=0)

    def _claim(self, index: int) -> bool:
        """Whether the run takes block ``index`` (nobody has): if so, the child will skip it."""
        if not self.alive:
            return True
        with self.free.get_lock():
            if self.free.value <= index:
                self.free.value = index + 1
                return True
        return False

    def _rows(self, block: list[Example]) -> list[tuple[str, str, str]]:
        """A block rendered by the run: each example's (sample id, key, packed prompt), as the child sends them."""
        return [(example.id, *self.render(example)) for example in block]

    def _rows_in_order(self, block: list[Example]) -> list[tuple[str, str, str]]:
        """A block the run claimed, rendered while earlier blocks wait for the child: should it raise,
        the earlier blocks are rendered first, so that the error raised is the first in sample order."""
        try:
            return self._rows(block)
        except BaseException:
            self.alive = False
            for earlier in self.waiting:
                if earlier.rows is None:
                    earlier.rows = self._rows(earlier.examples)
            raise

    def _done(self, limit: int) -> Iterator[Rendered]:
        """The head blocks that are done, in order. A head still waiting for the child is rendered by
        the run once more than ``limit`` blocks wait (the child is behind), at the end (``limit`` 0),
        or when the child has stopped: the run never waits for the child (at worst a block the
        child is rendering is rendered twice, and the child's rows are dropped)."""
        while self.waiting:
            head = self.waiting[0]
            if head.rows is None and (len(self.waiting) > limit or not self.alive):
                self._drain()
                if head.rows is None:
                    head.rows = self._rows(head.examples)
            if head.rows is None:
                return
            self.waiting.popleft()
            for example, (_, key, packed) in zip(head.examples, head.rows):
                yield example, key, packed

    def _drain(self) -> None:
        """The child's messages already sent (while fewer than :data:`ARRIVED` blocks' rows are held
        ahead of the run's reading)."""
        while self.alive and len(self.arrived) < ARRIVED and self.conn.poll():
            self._take()

    def _take(self) -> None:
        try:
            index, rows, texts = self.conn.recv()
        except (EOFError, OSError):
            self.alive = False
            return
        for key, text in texts:
            self.texts.setdefault(key, text)
        for block in self.waiting:
            if block.index == index and block.rows is None:
                self._given(block, rows)
                return
        if index >= self.reading_at:  # the child is ahead of the run's reading: held until the run reads it
            self.arrived[index] = rows
        # else a block the run has rendered meanwhile: gone, its rows are dropped

    def _given(self, block: _Waiting, rows: list[tuple[str, str, str]] | None) -> None:
        """The child's ``rows`` for ``block`` (None: not come yet). A short block (its rendering
        raised) or rows of other samples stop the child: the run renders the rest itself."""
        if rows is None:
            return
        if len(rows) == len(block.examples) and all(r[0] == e.id for r, e in zip(rows, block.examples)):
            block.rows = rows
        else:
            self.alive = False

    def stop(self) -> None:
        self.conn.close()
        forking.stop(self.process)


def _widen(conn: Connection) -> None:
    """Ask for a pipe buffer of :data:`PIPE_BYTES` (Linux only; refused or elsewhere, the default)."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        import fcntl

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def _child_main(conn: Connection, examples: Iterable[Example], render: RenderRow,
                texts: MutableMapping[str, str], free: Any) -> None:
    """The forked process: :func:`_child`'s work, then out without running the run's clean-ups (its
    connections and files are the run's)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle: it stops this child
    _child(conn, examples, render, texts, free)
    os._exit(0)


def _child(conn: Connection, examples: Iterable[Example], render: RenderRow,
           texts: MutableMapping[str, str], free: Any) -> None:
    """Claim the next free block, read up to it, render it, send its rows; until the examples end."""
    known = len(texts)
    reading = iter(examples)
    at = 0  # the block the reading is at
    with contextlib.suppress(BrokenPipeError, OSError):  # the run has stopped reading: so does the child
        while True:
            with free.get_lock():
                index = max(free.value, at)
                free.value = index + 1
            wanted = (index - at) * BLOCK
            skipped = sum(1 for _ in itertools.islice(reading, wanted))
            block = list(itertools.islice(reading, BLOCK))
            if skipped < wanted or not block:  # past the end
                break
            at = index + 1
            rows: list[tuple[str, str, str]] = []
            try:
                for example in block:
                    rows.append((example.id, *render(example)))
            except BaseException:  # noqa: BLE001 - the run renders the block again, and raises it there
                conn.send((index, rows, []))
                break
            added = list(texts.items())[known:]
            known = len(texts)
            conn.send((index, rows, added))
    conn.close()
