"""The one retry policy for every request evalpipe sends to an endpoint, in tenacity.

Chat and completions requests, embeddings batches, token counts and the model list all retry the
same way, so a flaky server is treated alike wherever it shows up:

* **What is retried** is decided where a failure is classified (:class:`RequestFailed`'s
  ``retryable``: connection errors, timeouts, HTTP 408/409/429/5xx, a 200 that is not a
  completion); other 4xx are final — a bad request stays bad.
* **How long to wait**: tenacity's :class:`~tenacity.wait_exponential_jitter` —
  ``backoff_base_s * 2**(n-1)`` plus up to ``backoff_base_s`` of jitter, capped at
  ``backoff_max_s`` — unless the server said how long (``Retry-After`` on a 429 or 503, seconds or
  an HTTP-date): then that, capped at ``retry_after_max_s``, plus a little jitter so the clients a
  server turned away together do not return together.
* **Every attempt, the first included, runs inside the policy**, so attempts are counted in one
  place and the policy is the whole story.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential_jitter
from tenacity.wait import wait_base

__all__ = ["GaveUp", "RequestFailed", "RetryPolicy", "parse_retry_after"]

T = TypeVar("T")

#: jitter added to a server-given Retry-After, at most
_RETRY_AFTER_JITTER_S = 1.0


class RequestFailed(Exception):
    """One failed attempt, already classified: a short ``reason`` (the key of the error counters,
    e.g. ``"HTTP 500"``), whether another attempt may help, the server's own words (``detail``,
    credentials already scrubbed) and how long the server asked us to wait."""

    def __init__(self, reason: str, *, retryable: bool, detail: str | None = None,
                 retry_after_s: float | None = None, status: int | None = None) -> None:
        super().__init__(reason if detail is None else f"{reason}: {detail}")
        self.reason = reason
        self.retryable = retryable
        self.detail = detail
        self.retry_after_s = retry_after_s
        self.status = status


class GaveUp(Exception):
    """The policy's last attempt failed: ``failure`` is that attempt's, ``attempts`` how many ran."""

    def __init__(self, failure: RequestFailed, attempts: int) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.attempts = attempts


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (RFC 9110: delta-seconds or an HTTP-date,
    read by the standard library's date parser); None if absent or unreadable; past dates give 0."""
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now)
        except (TypeError, ValueError, IndexError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


class _wait_retry_after(wait_base):  # noqa: N801 - tenacity's naming for wait strategies
    """The server's ``Retry-After`` when the failure carries one (capped, jittered), else ``fallback``."""

    def __init__(self, fallback: wait_base, cap_s: float, jitter_s: float) -> None:
        self.fallback = fallback
        self.cap_s = cap_s
        self.jitter_s = jitter_s

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        failure = outcome.exception() if outcome is not None else None
        if isinstance(failure, RequestFailed) and failure.retry_after_s is not None:
            return min(failure.retry_after_s, self.cap_s) + random.uniform(0, self.jitter_s)
        return self.fallback(retry_state)


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, RequestFailed) and exc.retryable


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` attempts after the first; backoff as the module docstring says."""

    max_retries: int = 6
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more (got {self.max_retries})")
        for name in ("backoff_base_s", "backoff_max_s", "retry_after_max_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative (got {getattr(self, name)})")

    def retrying(self, before_sleep: Callable[[RetryCallState], None] | None = None) -> AsyncRetrying:
        """A tenacity controller for this policy (copy it per call: ``.copy()``)."""
        return AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=_wait_retry_after(
                wait_exponential_jitter(multiplier=self.backoff_base_s, max=self.backoff_max_s,
                                        jitter=self.backoff_base_s),
                self.retry_after_max_s,
                min(self.backoff_base_s, _RETRY_AFTER_JITTER_S),
            ),
            retry=retry_if_exception(_retryable),
            before_sleep=before_sleep,
            reraise=True,
        )


async def call_with_retries(retrying: AsyncRetrying, attempt: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """Run ``attempt`` under ``retrying``; returns its result and how many attempts ran.

    Raises :class:`GaveUp` when the last attempt failed with a :class:`RequestFailed` (a final
    one, or the last allowed); any other exception propagates as it is.

    The first attempt runs before any controller exists: most requests succeed at once, and copying
    the controller (tenacity inspects each of its callbacks) cost ~7 % of the sending's CPU at
    thousands of requests a second (``bench/overlap.py --profile``). A failed first attempt is then
    the controller's first — raised again by it, not sent again — so waits, logging and the count of
    attempts are those of the controller run from the start.
    """
    try:
        return await attempt(), 1
    except RequestFailed as failure:
        first: RequestFailed | None = failure
    controller = retrying.copy()
    attempts = 1

    async def counted() -> T:  # the controller's first attempt is the one that has just failed
        nonlocal attempts, first
        if first is not None:
            failed, first = first, None
            raise failed
        attempts += 1
        return await attempt()

    try:
        return await controller(counted), attempts
    except RequestFailed as failure:
        raise GaveUp(failure, attempts) from None
