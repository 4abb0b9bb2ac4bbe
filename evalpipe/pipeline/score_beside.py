"""Score while sending: a forked process folds each samplewise task's pages as their answers commit.

Why a process: the sender is CPU-bound in its one thread (``bench/overlap.py``'s profile: the
client's request path already uses the one core the GIL allows), so scoring in the same process,
however interleaved, would only take turns with it. The child is forked once the plans are in the
store and before any backend exists, so it shares no thread and no connection with the sender; it
opens the store on its own and reads each task's plan a page at a time — exactly the chunks scoring
after the sending reads (:func:`evalpipe.rescoring.plan_chunks`, the same examples) —, waiting on a
page until every one of its answers is committed. Each task's fold (:class:`~evalpipe.scoring.fold.TaskFold`)
is handed back as its :class:`~evalpipe.scoring.fold.FoldState` (counts, summed parts, the records'
lines spilled in the stage's folder) and finished in the run's process, where the task's settings
live: the numbers are those of scoring after the sending, bit for bit (the same chunks in the same
order make the same sums). Only the tail — the pages whose answers came last — is left for after
the sending, and the data is read for scoring while the requests are in flight.

**Protocol.** Tiny messages over a pipe; what they carry is pickled into files of the stage's
folder, so neither side ever blocks on a full pipe. Parent → child, once the sending is over:
``("sent", path)`` with the requests that failed for good (a key still without an answer is then a
failure's, or was never answered). Child → parent: ``("done", path)`` with the states, or
``("error", path)`` with the traceback of what the child raised.

**Same priority as the sender.** Measured (``bench/overlap.py``, 94,000 sentences, the server on the
same 2 cores, a quiet machine): a child at niceness 10 folded only what CPU the sending left and
lagged, so 8.9 s of folding waited after the sending (run / sending ×1.82); at the run's own
priority the sending took longer (25.4 → 33.5 s) but 1.9 s was left after it (×1.43), for the same
whole run (46.2 s and 47.9 s, one round each). The work is the same either way; done during the
sending, it leaves no core idle at the end.

**When the child is used.** There is something to send (a resumed run whose answers are all
stored is scored at once), at least :data:`MIN_PENDING` prompts (a fork and a pipe cost more than
a small run's scoring), a samplewise task (a corpus scoring holds every sample until the end
anyway), and the rules of :mod:`evalpipe.forking` (Linux, no other thread).
``EVALPIPE_SCORE_BESIDE=0`` never uses it, ``=1`` whenever a fork is possible (the tests). If the child dies (killed, out of memory) or raises, the tasks are scored
after the sending as before: an error the child met (a sample id not in the data any more, a data
file changed, a scoring declared samplewise that is not) is then met, and raised, by the run itself,
with its own type and message — one line for a user's mistake, a traceback for a bug — and a
note says why the child gave nothing, should the run's scoring succeed.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import pickle
import signal
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from evalpipe.metrics.options import MetricOptions
from evalpipe import forking
from evalpipe.forking import fork_wanted
from evalpipe.records import Completion
from evalpipe.rescoring import plan_chunks
from evalpipe.scoring.fold import FoldState, TaskFold
from evalpipe.scoring.records import TakerFactory
from evalpipe.store.answers import ResponseStore
from evalpipe.tasks.base import Examples, TaskSpec

#: the setting: "0" never, "1" whenever a fork is possible, unset/"auto" by the rules of the docstring
ENV = "EVALPIPE_SCORE_BESIDE"
#: fewer prompts to send than this: scored after the sending (forking is not worth it)
MIN_PENDING = 4096
#: the child's wait between looks at a page's missing answers: doubled while none arrive, up to the max
POLL_FIRST_S, POLL_MAX_S = 0.05, 1.0


@dataclass(frozen=True)
class BesideJob:
    """One task (prompt condition) to fold beside the sending, with the settings scoring uses."""

    #: its position among the run's prepared tasks
    index: int
    spec: TaskSpec
    plan: str
    examples: Examples
    compat: str | None
    options: MetricOptions
    prefix: str
    #: where its records' lines are spilled (the stage's folder: deleted with the stage)
    scratch: Path
    #: what takes the report's extract of the spilled lines (:mod:`evalpipe.report.extract`); None: nothing
    taker: TakerFactory | None = None


def wanted(pending: int, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a run with ``pending`` prompts to send folds beside the sending (see the docstring)."""
    return fork_wanted(ENV, pending, MIN_PENDING, environ)


class ScoringBeside:
    """The parent's handle on the child: :meth:`start`, then :meth:`finish` once the sending is
    over (or :meth:`stop`, on any way out)."""

    def __init__(self, process: Any, conn: Connection, folder: Path) -> None:
        self._process, self._conn, self._folder = process, conn, folder
        self.tail_seconds = 0.0
        #: why the child gave no states (None: it gave them, or has not finished)
        self.problem: str | None = None

    @classmethod
    def start(cls, jobs: Sequence[BesideJob], store_path: Path, folder: Path) -> ScoringBeside:
        context = multiprocessing.get_context("fork")
        ours, theirs = context.Pipe(duplex=True)
        process = context.Process(target=_child, args=(theirs, tuple(jobs), store_path, folder),
                                  name="evalpipe-score-beside", daemon=True)
        process.start()
        theirs.close()
        return cls(process, ours, folder)

    def finish(self, failures: Mapping[str, Completion]) -> dict[int, FoldState] | None:
        """Tell the child the sending is over and wait for its folds: each task's state by its
        position, or None if it gave none — it died or raised, :attr:`problem` says which — and the
        caller scores as before. How long the wait was is :attr:`tail_seconds` (the pages whose
        answers came last)."""
        started = time.monotonic()
        try:
            return self._finish(failures)
        finally:
            self.tail_seconds = time.monotonic() - started

    def _finish(self, failures: Mapping[str, Completion]) -> dict[int, FoldState] | None:
        sent = _dump(self._folder, "failures", dict(failures))
        with contextlib.suppress(OSError):  # a child done already (every answer stored) has left
            self._conn.send(("sent", str(sent)))
        try:
            kind, where = self._conn.recv()
        except (EOFError, OSError):
            self.problem = f"it ended without a result (exit code {self._exit_code()})"
            return None
        payload = _load(Path(where))
        if kind == "done":
            states: dict[int, FoldState] = payload
            return states
        self.problem = f"it failed ({str(payload).strip().splitlines()[-1]})"
        return None

    def _exit_code(self) -> int | None:
        self._process.join(timeout=5)
        code: int | None = self._process.exitcode
        return code

    def stop(self) -> None:
        """The child ended (terminated if it still runs), the pipe closed."""
        forking.stop(self._process)
        self._conn.close()


def _dump(folder: Path, what: str, payload: Any) -> Path:
    fd, name = tempfile.mkstemp(dir=folder, prefix=f"beside-{what}-", suffix=".pickle")
    with os.fdopen(fd, "wb") as handle:
        pickle.dump(payload, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return Path(name)


def _load(path: Path) -> Any:
    try:
        with path.open("rb") as handle:
            return pickle.load(handle)
    finally:
        path.unlink(missing_ok=True)


class _Arrivals:
    """The child's reader of a page's answers: waits until each is stored, or the sending is over."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._failures: dict[str, Completion] | None = None

    def __call__(self, store: ResponseStore, keys: list[str]) -> Mapping[str, Completion]:
        found = store.get_many(keys)
        wanted = len(set(keys))
        wait = POLL_FIRST_S
        while len(found) < wanted and self._failures is None:
            if self._conn.poll(wait):
                self._receive()
            more = store.get_many([k for k in keys if k not in found])
            found.update(more)
            wait = POLL_FIRST_S if more else min(2 * wait, POLL_MAX_S)
        failures = self._failures or {}
        found.update((k, failures[k]) for k in keys if k not in found and k in failures)
        return found

    def _receive(self) -> None:
        try:
            kind, where = self._conn.recv()
        except EOFError:  # the run has gone: so does its child
            os._exit(1)
        assert kind == "sent", kind
        self._failures = _load(Path(where))


def _child(conn: Connection, jobs: tuple[BesideJob, ...], store_path: Path, folder: Path) -> None:
    """The forked process: fold every job's pages as their answers arrive; report the states."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle: it stops this child
    try:
        arrivals = _Arrivals(conn)
        states: dict[int, FoldState] = {}
        for job in jobs:
            source = functools.partial(plan_chunks, store_path, job.plan, job.examples)
            fold = TaskFold(job.spec, job.compat, job.options, job.prefix, source=source, scratch=job.scratch,
                            taker=job.taker)
            try:
                for chunk in plan_chunks(store_path, job.plan, job.examples, answers_of=arrivals):
                    fold.add(chunk)
            except BaseException:
                fold.abort()
                raise
            states[job.index] = fold.state()
        conn.send(("done", str(_dump(folder, "states", states))))
    except BaseException as exc:  # noqa: BLE001 - the run scores again, and raises it there
        conn.send(("error", str(_dump(folder, "error", "".join(traceback.format_exception(exc))))))
    finally:
        conn.close()
