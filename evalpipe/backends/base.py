"""The backend protocol: one rendered :class:`Prompt` in, one :class:`Completion` out.

A backend owns everything about talking to a model (transport, retries, how many requests are in
flight) and nothing about tasks. Request failures never raise out of :meth:`Backend.complete`: a
request that fails for good comes back as a ``Completion`` with ``error`` set, so one bad sample
cannot stop a run of thousands. Only :meth:`Backend.preflight` raises, before any work starts,
because a wrong URL or model name should stop a run at once with a one-line message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from evalpipe.records import Completion, Prompt


class BackendError(RuntimeError):
    """A fatal, user-facing backend problem (unreachable endpoint, unknown model, bad options).

    The message is one line that says what is wrong and what to do; it never contains secrets.
    """


@runtime_checkable
class Backend(Protocol):
    #: model name as the endpoint knows it; part of every cache key
    model: str

    async def preflight(self) -> None:
        """Check that the endpoint answers and serves ``model``; raise BackendError if not."""
        ...

    async def complete(self, prompt: Prompt) -> Completion:
        """Send one prompt; retry what is worth retrying; never raise for a failed request."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """Options worth recording in ``config.json`` (never an API key)."""
        ...

    def stats(self) -> Mapping[str, Any]:
        """Counters for the run summary (requests, retries, 429s, per-endpoint shares)."""
        ...
