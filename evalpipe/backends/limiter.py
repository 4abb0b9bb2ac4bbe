"""An adaptive (AIMD) concurrency limiter for talking to rate-limited endpoints.

Why adaptive: a fixed concurrency is either too timid for a local vLLM server or too aggressive
for a shared hosted endpoint, and an endpoint that answers 429 under load only gets worse if every
request keeps retrying at full concurrency. AIMD (additive increase, multiplicative decrease, as
in TCP congestion control) finds the level an endpoint sustains by itself: every 429 halves the
number of requests allowed in flight, every ``limit`` successes add one back, up to the
configured maximum.

A burst of 429s usually comes from one overload event (all requests in flight hit the same full
queue), so the limit is halved at most once per ``decrease_window_s``; without that, 64 requests
answered 429 together would collapse the limit to 1 in one go.

The limiter is not bound to an event loop: waiters are futures of whichever loop is running when
:meth:`AIMDLimiter.acquire` is called, so one instance works across ``asyncio.run`` calls
(though never across loops running at the same time).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType

__all__ = ["AIMDLimiter"]


class AIMDLimiter:
    """At most ``limit`` holders at a time; ``limit`` adapts between ``min_limit`` and ``max_limit``.

    Use ``async with limiter:`` around one request, then report how it went with
    :meth:`on_success` or :meth:`on_overload`. Waiters are served first come, first served.
    """

    def __init__(
        self,
        max_limit: int,
        *,
        min_limit: int = 1,
        initial: int | None = None,
        decrease_window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= min_limit <= max_limit:
            raise ValueError(f"need 1 <= min_limit ({min_limit}) <= max_limit ({max_limit})")
        start = max_limit if initial is None else initial
        if not min_limit <= start <= max_limit:
            raise ValueError(f"initial limit {start} is outside [{min_limit}, {max_limit}]")
        self.max_limit = max_limit
        self.min_limit = min_limit
        self.decrease_window_s = decrease_window_s
        self._clock = clock
        self._limit = start
        self._min_reached = start
        self._in_flight = 0
        self._peak_in_flight = 0
        self._successes_since_change = 0
        self._last_decrease: float | None = None
        self._decreases = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    # -- state --------------------------------------------------------------------------------

    @property
    def limit(self) -> int:
        """How many holders are allowed right now."""
        return self._limit

    @property
    def min_reached(self) -> int:
        """The lowest the limit has been since construction."""
        return self._min_reached

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def peak_in_flight(self) -> int:
        """The most holders there have been at the same time."""
        return self._peak_in_flight

    @property
    def decreases(self) -> int:
        """How many times the limit was halved."""
        return self._decreases

    def __repr__(self) -> str:
        return (
            f"AIMDLimiter(limit={self._limit}, max_limit={self.max_limit}, "
            f"in_flight={self._in_flight}, min_reached={self._min_reached})"
        )

    # -- acquire / release --------------------------------------------------------------------

    async def acquire(self) -> None:
        """Wait until fewer than ``limit`` holders remain, then become one."""
        if self._in_flight < self._limit and not self._waiters:
            self._take()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted just before the cancel arrived: pass the slot on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
                self._wake()
            raise

    def release(self) -> None:
        """Stop being a holder (call exactly once per successful :meth:`acquire`)."""
        if self._in_flight <= 0:
            raise RuntimeError("AIMDLimiter.release() called more often than acquire()")
        self._in_flight -= 1
        self._wake()

    async def __aenter__(self) -> AIMDLimiter:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _take(self) -> None:
        self._in_flight += 1
        if self._in_flight > self._peak_in_flight:
            self._peak_in_flight = self._in_flight

    def _wake(self) -> None:
        """Hand free capacity to waiters in arrival order (skipping ones cancelled meanwhile)."""
        while self._waiters and self._in_flight < self._limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._take()
                waiter.set_result(None)

    # -- feedback -----------------------------------------------------------------------------

    def on_success(self) -> None:
        """A request went through: after ``limit`` of them in a row, allow one more holder."""
        if self._limit >= self.max_limit:
            return
        self._successes_since_change += 1
        if self._successes_since_change >= self._limit:
            self._limit += 1
            self._successes_since_change = 0
            self._wake()

    def on_overload(self) -> bool:
        """The endpoint said it is overloaded (HTTP 429): halve the limit, at most once a window.

        Returns whether the limit was lowered. Holders above the new limit finish normally;
        new acquires wait until the count is under it.
        """
        now = self._clock()
        if self._last_decrease is not None and now - self._last_decrease < self.decrease_window_s:
            return False
        self._last_decrease = now
        self._successes_since_change = 0
        new_limit = max(self.min_limit, self._limit // 2)
        if new_limit == self._limit:
            return False
        self._limit = new_limit
        self._decreases += 1
        self._min_reached = min(self._min_reached, new_limit)
        return True
