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


#: API keys shorter than this are placeholders ("EMPTY", "x"); scrubbing them would mangle text
MIN_SECRET_LEN = 6


class Secret:
    """Holds the API key so that no repr, log record or f-string can show it by accident."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def scrub(self, text: str) -> str:
        """Replace the key (when it is a real one) in text we are about to show or store."""
        if len(self._value) >= MIN_SECRET_LEN and self._value in text:
            return text.replace(self._value, "***")
        return text

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


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
        """Options worth recording in ``config.json``: never an API key, and URLs only as
        :func:`evalpipe.endpoints.redact_url` shows them."""
        ...

    def stats(self) -> Mapping[str, Any]:
        """Counters for the run summary (requests, retries, 429s, per-endpoint shares)."""
        ...
