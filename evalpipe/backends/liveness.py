"""Is the endpoint still there? A run stops with one line when it has gone, instead of retrying
every pending request against a closed port for minutes.

Why: the start-up check (``GET /models``) catches a server that is down before the first request,
but a server that dies mid-run left each of the pending requests to its own retry schedule — 7
attempts, backoff up to 30 s — so 40 requests took 11 minutes to fail (issue 21).

**When is an endpoint gone?** When, across every worker (and every replica of the model: one
:class:`Liveness` is shared by them), the last ``min_failures`` attempts in a row failed to
*connect* — connection refused or reset, the server closing the connection — and nothing answered
for ``after_s`` seconds. Any HTTP reply (a 200, a 500, a 429), and any timeout, breaks the streak: a
server that answers, however badly or slowly, is alive, and its requests keep their own retries. So
a slow, timeout-heavy server never trips it, and one replica down while another answers does not
either (the replicas fail over as before).

What it cannot see: a host that drops packets without refusing (every attempt a timeout) — that
is ambiguous with a slow server, so it is left to the retry budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from evalpipe.backends.base import BackendError
from evalpipe.errors import EXIT_ENDPOINT_GONE, UsageError

#: defaults: nothing but failed connections for 30 s, at least 5 attempts in a row
AFTER_S = 30.0
MIN_FAILURES = 5


class EndpointGone(BackendError):
    """The endpoint stopped accepting connections mid-run (see the module docstring); one line."""

    exit_code = EXIT_ENDPOINT_GONE


class Liveness:
    """The streak of failed connections since the last sign of life, shared by a run's backends."""

    def __init__(self, after_s: float = AFTER_S, min_failures: int = MIN_FAILURES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if after_s < 0 or min_failures < 1:
            raise UsageError(f"unreachable-after must be 0 (never) or more seconds, got {after_s}")
        self.after_s = after_s
        self.min_failures = min_failures
        self._clock = clock
        self._streak = 0
        self._since: float | None = None
        self._answered = 0
        #: set once tripped: every later attempt says the same at once
        self._gone: EndpointGone | None = None

    def alive(self) -> None:
        """A reply came (any HTTP status) or an attempt timed out: the streak is broken."""
        self._streak = 0
        self._since = None

    def answered(self) -> None:
        """A request was answered (counted for the message)."""
        self._answered += 1
        self.alive()

    def check(self) -> None:
        """Raise the :class:`EndpointGone` already decided (other workers stop at once)."""
        if self._gone is not None:
            raise self._gone

    def refused(self, url: str, detail: str | None) -> None:
        """An attempt could not connect; raise :class:`EndpointGone` when the endpoint counts as gone."""
        self.check()
        now = self._clock()
        if self._since is None:
            self._since = now
        self._streak += 1
        if self.after_s <= 0 or self._streak < self.min_failures or now - self._since < self.after_s:
            return
        before = f"{self._answered} answered before" if self._answered else "none answered in this run"
        self._gone = EndpointGone(
            f"{url} stopped answering: {self._streak} attempts in a row could not connect over "
            f"{now - self._since:.0f}s ({detail or 'connection error'}; {before}). Every answer received is "
            "stored: run the same command again when the server is back (--unreachable-after sets how long "
            "to wait, 0 = retry every request as usual)")
        raise self._gone
