"""Keeping Python's garbage collector off data that lives for a whole run.

A run holds every example (tokens, gold spans …) from loading to writing, and the report every
sample record: hundreds of thousands of container objects, none in a reference cycle and none
garbage until the end. CPython's cyclic collector does not know that: each full collection walks
them all again. During the sending phase of a 47,000-sample run that cost a third of the client's
CPU — 2,500–2,800 requests/s with the collector walking the examples, 3,700 without
(``bench/memory.py``, the same machine and load, interleaved).

So the long-lived data is moved out of the collector's sight while it lives
(:func:`gc.freeze`): :func:`frozen_heap` freezes what exists when it is entered — and again each
time its ``settle()`` is called, once more long-lived data is made (the answers) — and unfreezes
on exit, so everything is collected as usual afterwards. Objects created in between (one request's
buffers, one record) are collected as always. :func:`collector_paused` switches the collector off
for a bulk load that makes only long-lived objects (reading every record of a report).

Both leave the collector alone where the process manages it itself (collector disabled, or
objects already frozen by someone else).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
from collections.abc import Callable, Iterator

__all__ = ["collector_paused", "frozen_heap", "give_back_free_memory"]


def _managed_elsewhere() -> bool:
    return not gc.isenabled() or gc.get_freeze_count() > 0


@contextlib.contextmanager
def frozen_heap() -> Iterator[Callable[[], None]]:
    """Freeze what exists now; the yielded ``settle()`` freezes what exists then; unfreeze on exit."""
    if _managed_elsewhere():
        yield lambda: None
        return
    gc.freeze()
    try:
        yield gc.freeze
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block (a bulk load of long-lived, acyclic data)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def give_back_free_memory() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; nothing elsewhere).

    A bulk load frees most of what it made on the way (a decoded batch, its lists and strings)
    between the objects it keeps, and glibc keeps those free pages. At 94,000 NCBI samples read
    from a run's extract, ~17 MB of the report's resident memory were such pages (issue 28); given
    back, they count in no process's memory, and cost ~10 ms to find."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):  # another C library (musl has no malloc_trim)
        return None
    return trim
