"""Answers committed in groups, each one durable before the run counts it.

One SQLite transaction per answer costs a commit per answer; at a thousand answers a second that
is a good part of the client's CPU. Answers arrive in waves (a server answers the requests of one
wave at about the same time), so :class:`AnswerWriter` commits the answers that arrive together in
one transaction: :meth:`AnswerWriter.put` adds an answer to the open group and returns only when
that group is committed. The runner counts an answer (progress, ``sent``, the results) after
``put`` returns, so "every answer is stored on arrival" holds as before: a run killed at any
moment loses only answers it had not yet counted — requests still in flight, from its point of
view — and a resumed run asks exactly those again.

When a group is committed: the first answer of a group schedules the commit, which then lets the
event loop run :data:`YIELDS` times — every answer of the same wave that is already decoded joins
the group, and every request those answers' slots let through is sent first — and commits at most
:data:`MAX_GROUP` answers at once. A commit is a few milliseconds at most (``synchronous=NORMAL``
in WAL mode does not wait for the disk), on the event loop's thread: the store is one connection,
and handing it to a thread would cost more than the commit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from evalpipe.store.answers import ResponseStore
from evalpipe.records import Completion

__all__ = ["MAX_GROUP", "YIELDS", "AnswerWriter", "WriterStats"]

#: event-loop turns a group stays open after its first answer
YIELDS = 2
#: answers committed in one transaction at most
MAX_GROUP = 1024


@dataclass
class WriterStats:
    answers: int = 0
    commits: int = 0
    #: the longest a commit held the event loop, in seconds
    longest_commit_s: float = 0.0


class AnswerWriter:
    """Group commit of answers into a :class:`ResponseStore` (see the module docstring)."""

    def __init__(self, store: ResponseStore, model: str, *, yields: int = YIELDS, max_group: int = MAX_GROUP) -> None:
        self.store = store
        self.model = model
        self.yields = yields
        self.max_group = max_group
        self.stats = WriterStats()
        self._group: list[tuple[str, Completion]] = []
        self._committed: asyncio.Future[None] | None = None
        #: the scheduled commits (the event loop keeps only weak references to tasks)
        self._pending: set[asyncio.Task[None]] = set()

    async def put(self, key: str, completion: Completion) -> None:
        """Add a successful answer to the open group; return once the group is committed.

        Raises what the commit raised (a full disk …) in every caller of the group.
        """
        if self._committed is None:
            self._committed = asyncio.get_running_loop().create_future()
            task = asyncio.get_running_loop().create_task(self._commit_soon(self._committed))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        committed = self._committed
        self._group.append((key, completion))
        if len(self._group) >= self.max_group:
            self._commit_now()
        await asyncio.shield(committed)

    def flush(self) -> None:
        """Commit the open group now: a run that is being stopped (its engine died, its endpoint
        is gone, Ctrl-C) keeps every answer that had arrived, counted or not yet."""
        if self._group:
            self._commit_now()

    async def _commit_soon(self, committed: asyncio.Future[None]) -> None:
        for _ in range(self.yields):
            await asyncio.sleep(0)
        if self._committed is committed:
            self._commit_now()

    def _commit_now(self) -> None:
        group, committed = self._group, self._committed
        self._group, self._committed = [], None
        if committed is None or committed.done():
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            self.store.put_many(self.model, group)
        except Exception as exc:  # every waiter of the group sees it
            committed.set_exception(exc)
            committed.exception()  # retrieved here: the waiters re-raise it
            return
        except BaseException:
            committed.cancel()
            raise
        finally:
            self.stats.longest_commit_s = max(self.stats.longest_commit_s, loop.time() - started)
        self.stats.answers += len(group)
        self.stats.commits += 1
        committed.set_result(None)
