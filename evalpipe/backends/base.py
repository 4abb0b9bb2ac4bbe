"""The backend protocol: one rendered :class:`Prompt` in, one :class:`Completion` out.

A backend owns everything about talking to a model (transport, retries, how many requests are in
flight) and nothing about tasks. Request failures never raise out of :meth:`Backend.complete`: a
request that fails for good comes back as a ``Completion`` with ``error`` set, so one bad sample
cannot stop a run of thousands. Only :meth:`Backend.preflight` raises, before any work starts,
because a wrong URL or model name should stop a run at once with a one-line message.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from evalpipe.records import Completion, Message, Prompt
from evalpipe.errors import EndpointError


#: secrets shorter than this are placeholders ("EMPTY", "x"); scrubbing them would mangle text
MIN_SECRET_LEN = 6


class Credentials:
    """What an endpoint is told about who we are: an API key and/or the user-info of the base URL.

    Why one object: a credential leaves the process in several forms — the raw key, the
    ``Authorization: Bearer <key>`` header, ``user:password`` from a URL, the
    ``Authorization: Basic <base64(user:password)>`` header, a query-string secret, base64-,
    percent-encoded or JSON-escaped copies — and a careless server may quote any of them back in an
    error body (issue 14) or in an answer (issue 22). Every
    text a backend shows or stores passes :meth:`scrub`, which knows all the forms. No repr,
    log record or f-string shows a credential by accident.
    """

    __slots__ = ("_basic", "_key", "_forms")

    def __init__(self, api_key: str | None, url: str | None = None) -> None:
        self._key = api_key or "EMPTY"
        parts = urlsplit(url or "")
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        self._basic = base64.b64encode(f"{user}:{password}".encode()).decode("ascii") if parts.username else None
        forms = {self._key, f"Bearer {self._key}"}
        if parts.username is not None:
            forms |= {f"{user}:{password}", f"{parts.username}:{parts.password or ''}", password,
                      parts.password or ""}
        if self._basic is not None:  # (an empty user name, as in http://@host, sends no Basic header)
            forms |= {self._basic, f"Basic {self._basic}"}
        forms |= {value for _, value in parse_qsl(parts.query)}  # keys hidden in a query string
        # the key base64-encoded and percent-encoded too: a server (or a model told to) may echo either
        forms |= {base64.b64encode(secret.encode()).decode("ascii").rstrip("=") for secret in set(forms) if secret != "EMPTY"}
        forms |= {quote(secret, safe="") for secret in set(forms)}
        # longest first, so "Bearer <key>" goes whole before the key alone
        candidates = {f for f in forms if len(f) >= MIN_SECRET_LEN and f not in ("Bearer EMPTY",)}
        escaped = {f.replace("/", "\\/") for f in candidates if "/" in f}  # JSON's optional "\/" escape
        self._forms = tuple(sorted(candidates | escaped, key=len, reverse=True))

    @property
    def authorization(self) -> str:
        """The ``Authorization`` header: Basic from the URL's user-info where given, else Bearer."""
        return f"Basic {self._basic}" if self._basic is not None else f"Bearer {self._key}"

    @property
    def key_set(self) -> bool:
        return self._key != "EMPTY"

    def scrub(self, text: str) -> str:
        """Replace every form of every credential in text we are about to show or store."""
        for form in self._forms:
            if form in text:
                text = text.replace(form, "***")
        return text

    def __repr__(self) -> str:
        return "<credentials>"

    __str__ = __repr__


class BackendError(EndpointError):
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

    async def models(self) -> Sequence[Mapping[str, Any]]:
        """The endpoint's model list (``GET /models`` entries), asked once and remembered; raise
        BackendError when it cannot be had."""
        ...

    async def context_length(self) -> int | None:
        """The context the endpoint serves ``model`` with (vLLM's ``max_model_len``), if it says."""
        ...

    async def count_tokens(self, content: str | Sequence[Message]) -> int | None:
        """Tokens of a text, or of a conversation with the model's chat template and generation
        prompt applied, counted by the model's own tokenizer; None when the endpoint cannot count
        that form. Counts are remembered; many may be asked at once."""
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
