"""When a run or a report may fork a helper process: the one rule the helpers beside the run's work share.

The helpers beside a run's or a report's work (:mod:`evalpipe.pipeline.render_beside`,
:mod:`evalpipe.pipeline.score_beside`, :mod:`evalpipe.report.browser_beside`; this module is
outside :mod:`evalpipe.pipeline`, which the report must not import) are forked, not spawned, so
they have the very objects the run made (tasks, renderers, streams) and nothing has to be
rebuilt or pickled but their results. A fork is taken only where it is safe
and worth it: on Linux (forking is unsafe on macOS and absent on Windows), in a process with no
other thread (a fork copies every lock, held or not, and the thread holding it does not come
along), with at least two cores, for work of at least ``minimum`` items (a fork and a pipe cost
more than a small job), and — for a helper that competes with the run for the CPU — with a core
idle right now (measured: on 2 cores with one busy elsewhere, rendering in two processes took
x1.3–1.9 the wall time of rendering in one).
Each helper has a setting: ``0`` never, ``1`` whenever a fork exists (the tests), unset or ``auto``
by the rules above.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.process import BaseProcess

_NEVER = {"0", "no", "off", "false"}
_ALWAYS = {"1", "yes", "on", "true"}


def fork_wanted(setting: str, work: int, minimum: int, environ: Mapping[str, str] = os.environ,
                idle_needed: float = 0.0) -> bool:
    """Whether to fork a helper for ``work`` items, under the environment variable ``setting``;
    ``idle_needed``: how much of a core must be idle right now (a helper that would only take turns
    with the run for a busy machine's cores slows it)."""
    value = environ.get(setting, "auto").strip().lower()
    if value in _NEVER or work <= 0 or "fork" not in multiprocessing.get_all_start_methods():
        return False
    if value in _ALWAYS:
        return True
    if sys.platform != "linux" or work < minimum or threading.active_count() != 1 or _cores() < 2:
        return False
    return idle_needed <= 0 or idle_cores() >= idle_needed


def stop(process: BaseProcess, grace_s: float = 5.0) -> None:
    """A helper ended and reaped: terminated if it still runs, killed if it outlives ``grace_s`` more."""
    if process.is_alive():
        process.terminate()
        process.join(timeout=grace_s)
        if process.is_alive():
            process.kill()
    process.join()


def fork_child(work: Callable[[], None]) -> int | None:
    """A forked child doing ``work`` and leaving, with exit code 0 when it returned (1 when it
    raised), without the parent's exit handlers; its pid, or None where no fork was to be had (a
    process limit, memory). The child runs without the cyclic collector: a short-lived helper
    makes no cycles, and a collection would walk (and so copy) the parent's pages."""
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid == 0:
        status = 1
        gc.disable()
        try:
            work()
            status = 0
        finally:
            os._exit(status)
    return pid


def reaped(pid: int) -> int | None:
    """The exit code of the forked child ``pid``, once it has exited (None when a signal ended it,
    or it was already reaped)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None


def kill(pid: int) -> None:
    """The forked child ``pid`` killed (a child that already ended is left to be reaped)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def idle_cores(window_s: float = 0.05) -> float:
    """How many of the machine's cores were idle over the last ``window_s`` (``/proc/stat``, twice);
    0 where it cannot be read. Measured now, not the load average: that lags by minutes, and would
    call a machine busy for a while after the last run ended."""
    first = _cpu_times()
    time.sleep(window_s)
    second = _cpu_times()
    if first is None or second is None:
        return 0.0
    total = sum(second) - sum(first)
    idle = (second[3] + second[4]) - (first[3] + first[4])  # idle, iowait
    return (os.cpu_count() or 1) * idle / total if total > 0 else 0.0


def _cpu_times() -> list[int] | None:
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 6:
        return None
    return [int(v) for v in fields[1:]]
