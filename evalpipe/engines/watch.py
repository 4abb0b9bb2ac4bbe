"""Watched engines: a run stops within a second when an engine evalpipe started dies under it.

Why: an engine that crashes mid-run (llama.cpp's SIGSEGV on an AVX-512 VM, a vLLM engine core that
runs out of memory) otherwise leaves every pending request to be retried against a closed port —
7 attempts each, minutes of backoff — and the only word is "connection refused". Instead the run
(``run``, ``demo``, ``judge``) is cancelled, every answer already received stays committed in the
store (a re-run resumes from there), and one line says which engine ended, how (the signal's name
or the exit code) and what it last wrote: :class:`EngineDied`, exit code ``EXIT_ENGINE_DIED``.

The watch is a poll of the child's exit status every quarter second beside the run's coroutine
(:func:`run_watched`): cheap, and it needs no cooperation from the backend. In-process vLLM has no
child to watch; its dead engine surfaces as an exception from ``LLM.generate``, which
:mod:`evalpipe.backends.vllm_inprocess` turns into the same :class:`EngineDied`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Sequence
from typing import Protocol, TypeVar
from evalpipe.errors import EXIT_ENGINE_DIED, EngineError


T = TypeVar("T")

#: how often a watched engine's exit status is read
POLL_S = 0.25
#: how many of the engine's last log lines the one line carries
TAIL_LINES = 3


def ended(returncode: int) -> str:
    """An exit status in words: ``killed by SIGSEGV`` for a signal, else ``exit code N``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class EngineDied(EngineError):
    """An engine evalpipe started ended while a run used it. The message is one line: the engine,
    how it ended, its last log lines, and that the answers so far are stored."""

    exit_code = EXIT_ENGINE_DIED


def death_line(name: str, how: str, log_tail: str, tail_label: str = "its last log lines") -> str:
    """The one line for an engine that ended (``how``: e.g. ``killed by SIGSEGV``, ``exit code 1``)."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()][-TAIL_LINES:]
    last = f"; {tail_label}: {' | '.join(lines)}" if lines else "; it wrote no log lines"
    return (f"the {name} engine died ({how}) while evalpipe was using it{last}. Every answer received "
            "before is stored: run the same command again to resume")


def death_of(returncode: int, name: str, log_tail: str) -> EngineDied:
    return EngineDied(death_line(name, ended(returncode), log_tail))


class Watched(Protocol):
    """What :func:`run_watched` needs of an engine (``ManagedServer`` has it)."""

    def died(self) -> EngineDied | None:
        """None while it runs (or before it started, or after evalpipe stopped it)."""
        ...


def _any_death(engines: Sequence[Watched]) -> EngineDied | None:
    for engine in list(engines):  # a judge engine joins the list once it is started
        death = engine.died()
        if death is not None:
            return death
    return None


async def _first_death(engines: Sequence[Watched], poll_s: float) -> EngineDied:
    while True:
        death = _any_death(engines)
        if death is not None:
            return death
        await asyncio.sleep(poll_s)


async def run_watched(work: Awaitable[T], engines: Sequence[Watched], poll_s: float = POLL_S) -> T:
    """Await ``work``; if one of ``engines`` dies first, cancel it (its cleanup runs: answers
    received are committed, the store is closed) and raise that engine's :class:`EngineDied`.

    ``engines`` is read again at every poll, so an engine started while ``work`` runs is watched too.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_first_death(engines, poll_s))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # interrupted (Ctrl-C): both go
        task.cancel()
        watcher.cancel()
        raise
    if task.done():
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        if not task.cancelled() and task.exception() is not None:
            # the run failed: because its engine died (connections refused first)? Then say that
            death = _any_death(engines)
            if death is None and engines:  # its exit status may trail the refused connections a little
                await asyncio.sleep(poll_s)
                death = _any_death(engines)
            if death is not None:
                raise death from None
        return task.result()
    death = watcher.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):  # what the dying run raised is its echo
        await task
    raise death
