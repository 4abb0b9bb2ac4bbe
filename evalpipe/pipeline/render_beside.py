"""Render a large plan in two processes: a forked child renders two blocks of every three.

Why: rendering happens before any request (a template or data error costs nothing), so while a
large plan renders the run has nothing else to do — and one core of the machine idles. Rendering is
Python (Jinja, the JSON of each prompt, its cache key) and holds the GIL, so a second thread would
not help; a forked child does. The plan is still staged by the run alone, in evaluation order, in
one transaction (:meth:`evalpipe.pipeline.stage.PlanStage.write`): the child only sends rows back.

**How.** The run renders the first :data:`START` examples alone (a plan smaller than that never
forks). Then it forks a child that reads the examples again (a stream opens its file anew: the
run's own reading is not shared) and, from position :data:`START` on, renders the blocks of
:data:`BLOCK` examples whose index is not a multiple of three, sending each block's rows — the
sample id, the cache key, the packed prompt — through a pipe, with the shared texts its packing
added (:class:`~evalpipe.store.prompt_pack.Packer` learns a text when a prompt first refers to it;
the run's packer must hold all of them). The run goes on reading every example (``watch`` sees
each, in order, as before), renders the blocks that are its own and takes the others' rows from the
pipe. The child's share is two blocks in three because the run also reads the data, calls
``watch`` and writes the stage: measured, that balances the two (bench/overlap.py, Findings).

**Same rows.** A prompt is a deterministic function of its example (``make_prompt``'s contract),
so the child's rows are the ones the run would make; each carries its sample id, checked against
the run's example. If the child stops early — its rendering raised (a template error at sample
40,000), it died, or an id does not match — the run renders everything from there itself: an error
is then raised by the run, at the same sample and with the same message as without a child.

``EVALPIPE_RENDER_BESIDE=0`` never forks, ``=1`` whenever a fork is possible (the tests); the
rules otherwise are :mod:`evalpipe.pipeline.forking`'s.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from multiprocessing.connection import Connection
from typing import Any

from evalpipe.pipeline.forking import fork_wanted
from evalpipe.records import Example

ENV = "EVALPIPE_RENDER_BESIDE"
#: examples the run renders alone before it forks (a multiple of BLOCK)
START = 4096
#: examples per block (one message of the pipe: some hundred KB of rows)
BLOCK = 256

#: an example's rendered row: (cache key, packed prompt JSON)
RenderRow = Callable[[Example], tuple[str, str]]


#: of every CYCLE blocks after START, the run renders the first RUNS and the child the others
CYCLE, RUNS = 3, 1


def _childs(position: int) -> bool:
    """Whether the child renders the example at ``position`` (see CYCLE)."""
    return position >= START and (position // BLOCK) % CYCLE >= RUNS


def rendered(examples: Iterable[Example], render: RenderRow, texts: MutableMapping[str, str],
             watch: Callable[[Example], None] | None = None) -> Iterator[tuple[Example, str, str]]:
    """Every example with its rendered row, in order; ``texts`` (the packer's shared texts, which
    ``render`` may add to) gets the child's additions too. ``watch`` sees each example first."""
    helper: _Helper | None = None
    try:
        for position, example in enumerate(examples):
            if watch is not None:
                watch(example)
            # a fork only for examples that can be read again (a stream re-opens its file; an iterator
            # read in the child would move the run's own reading)
            if position == START and iter(examples) is not examples and fork_wanted(ENV, 1, 0):
                helper = _Helper.start(examples, render, texts)
            row = helper.row(example) if helper is not None and _childs(position) else None
            key, packed = row if row is not None else render(example)
            yield example, key, packed
    finally:
        if helper is not None:
            helper.stop()


class _Helper:
    """The run's end of the child: its blocks of rows, read in order as the run reaches them."""

    def __init__(self, process: Any, conn: Connection, texts: MutableMapping[str, str]) -> None:
        self._process, self._conn, self._texts = process, conn, texts
        self._rows: Iterator[tuple[str, str, str]] = iter(())
        self._alive = True

    @classmethod
    def start(cls, examples: Iterable[Example], render: RenderRow, texts: MutableMapping[str, str]) -> _Helper:
        context = multiprocessing.get_context("fork")
        ours, theirs = context.Pipe(duplex=False)
        process = context.Process(target=_child, args=(theirs, examples, render, texts),
                                  name="evalpipe-render-beside", daemon=True)
        process.start()
        theirs.close()
        return cls(process, ours, texts)

    def row(self, example: Example) -> tuple[str, str] | None:
        """The child's row for ``example`` (None: the child has stopped; the run renders it)."""
        if not self._alive:
            return None
        found = next(self._rows, None)
        if found is None:
            found = self._next_block()
        if found is None or found[0] != example.id:
            self._alive = False
            return None
        return found[1], found[2]

    def _next_block(self) -> tuple[str, str, str] | None:
        try:
            rows, texts = self._conn.recv()
        except (EOFError, OSError):
            return None
        for key, text in texts:
            self._texts.setdefault(key, text)
        self._rows = iter(rows)
        return next(self._rows, None)

    def stop(self) -> None:
        self._conn.close()
        if self._process.is_alive():
            self._process.terminate()
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


def _child(conn: Connection, examples: Iterable[Example], render: RenderRow,
           texts: MutableMapping[str, str]) -> None:
    """The forked process: render the child's blocks, send each with the shared texts it added."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle: it stops this child
    known = len(texts)
    block: list[tuple[str, str, str]] = []

    def send() -> None:
        nonlocal known
        added = list(texts.items())[known:]
        known = len(texts)
        conn.send((block, added))
        block.clear()

    with contextlib.suppress(BrokenPipeError, OSError):  # the run has stopped reading: so does the child
        for position, example in enumerate(examples):
            if not _childs(position):
                if block:
                    send()
                continue
            try:
                block.append((example.id, *render(example)))
            except BaseException:  # noqa: BLE001 - the run renders it again, and raises it there
                break
        if block:
            send()
    conn.close()
    os._exit(0)
