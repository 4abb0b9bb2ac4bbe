"""Progress reporting: a rich bar on a terminal, periodic plain lines otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from evalpipe.records import Completion


class _Counter:
    def __init__(self) -> None:
        self.done = 0
        self.errors = 0
        self.total = 0
        self.cached = 0
        self.started = time.monotonic()

    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return (self.done - self.cached) / elapsed if elapsed > 0 else 0.0


class RichProgress:
    def __init__(self, console: Console) -> None:
        self._counter = _Counter()
        self._progress = Progress(
            TextColumn("[bold]requests"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.1f} req/s"),
            TextColumn("[red]{task.fields[errors]} errors"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None

    def start(self, total: int, cached: int) -> None:
        self._counter.total, self._counter.cached, self._counter.done = total, cached, cached
        self._counter.started = time.monotonic()
        self._progress.start()
        self._task = self._progress.add_task("run", total=total, completed=cached, rate=0.0, errors=0)

    def advance(self, completion: Completion) -> None:
        c = self._counter
        c.done += 1
        c.errors += 0 if completion.ok else 1
        if self._task is not None:
            self._progress.update(self._task, advance=1, rate=c.rate(), errors=c.errors)

    def close(self) -> None:
        self._progress.stop()


class LineProgress:
    """One line every ``every_s`` seconds and one at the end: readable in a log file."""

    def __init__(self, stream: TextIO | None = None, every_s: float = 10.0) -> None:
        # sys.stderr looked up now, not at import: whoever imported this module first may have
        # had a stream in place that is closed by now
        self._stream = stream if stream is not None else sys.stderr
        self._every = every_s
        self._counter = _Counter()
        self._last = 0.0

    def start(self, total: int, cached: int) -> None:
        self._counter.total, self._counter.cached, self._counter.done = total, cached, cached
        self._counter.started = self._last = time.monotonic()
        self._line("start")

    def _line(self, what: str) -> None:
        c = self._counter
        remaining = c.total - c.done
        rate = c.rate()
        eta = f"{remaining / rate:.0f}s" if rate > 0 else "?"
        print(f"[evalpipe] {what}: {c.done}/{c.total} done ({c.cached} cached), "
              f"{rate:.1f} req/s, {c.errors} errors, eta {eta}", file=self._stream, flush=True)

    def advance(self, completion: Completion) -> None:
        c = self._counter
        c.done += 1
        c.errors += 0 if completion.ok else 1
        now = time.monotonic()
        if now - self._last >= self._every:
            self._last = now
            self._line("progress")

    def close(self) -> None:
        self._line("finished")


def make_progress(console: Console) -> RichProgress | LineProgress:
    return RichProgress(console) if console.is_terminal else LineProgress()


class ProgressSink(Protocol):
    """What a run tells about its answers as they are committed (the CLI's bar, a test's checks)."""

    def start(self, total: int, cached: int) -> None: ...
    def advance(self, completion: Completion) -> None: ...
    def close(self) -> None: ...


class NullProgress:
    """A run nobody watches (the Python API, tests): told everything, shows nothing."""

    def start(self, total: int, cached: int) -> None: ...
    def advance(self, completion: Completion) -> None: ...
    def close(self) -> None: ...
