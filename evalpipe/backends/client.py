"""One keep-alive HTTP client per endpoint, on aiohttp: JSON in, JSON out, every failure classified.

Why aiohttp's ``ClientSession`` directly and not the openai SDK: measured side by side
(``bench/throughput.py``), the SDK's cheapest request path costs about twice the client CPU per
request of this whole backend on the SDK's own aiohttp client, four times on its default httpx2
client, and importing it takes ~0.6 s. evalpipe needs none of what that buys (typed models, its retries, Azure's auth variants):
an OpenAI-compatible endpoint takes a JSON body and a Bearer header. See docs/architecture.md.

What the client does:

* **Keep-alive pool of ``connections``** (``aiohttp.TCPConnector(limit=...)``), so every request
  in flight has its connection and finished ones are reused at once.
* **Auth in one header**, from :class:`~evalpipe.backends.base.Credentials`: Basic from the base
  URL's user-info where given, else Bearer; the user-info never travels in the URL itself.
* **Proxies from the environment** (``HTTP(S)_PROXY``, ``NO_PROXY``), as any HTTP client would,
  looked up once per client (:func:`env_proxy`).
* **Failures become :class:`~evalpipe.backends.retry.RequestFailed`**, the one vocabulary the retry
  policy and the error counters know: ``HTTP 429`` (with Retry-After), ``HTTP 500``, ``timeout``,
  ``connection error``, ``malformed JSON response``. The server's own words are kept as
  ``detail`` — one line, short, with every credential form scrubbed.

The session is created on first use inside the running event loop; use one client inside one loop
and ``await client.aclose()`` at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from evalpipe.backends.base import Credentials
from evalpipe.backends.retry import RequestFailed, parse_retry_after

__all__ = ["EndpointClient", "decode_json", "env_proxy", "one_line", "strip_userinfo"]

#: status codes worth another attempt besides 5xx
RETRY_STATUSES = frozenset({408, 409, 429})
DETAIL_MAX_CHARS = 200
_HEADERS = {"Content-Type": "application/json"}
_SURROGATES = re.compile("[\ud800-\udfff]")


def one_line(text: str | None, credentials: Credentials, limit: int = DETAIL_MAX_CHARS) -> str | None:
    """``text`` as one line of at most ``limit`` characters, every credential form scrubbed and
    lone surrogates replaced (they cannot be written as UTF-8); None for nothing."""
    if not text:
        return None
    line = " ".join(credentials.scrub(_SURROGATES.sub("\ufffd", text)).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def strip_userinfo(url: str) -> str:
    """The URL without ``user:password@`` (that goes into the Authorization header instead)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def env_proxy(url: str) -> tuple[Any, Any]:
    """The proxy the environment sets for ``url`` (``HTTP(S)_PROXY``, ``NO_PROXY``), looked up once
    with aiohttp's own helper, or ``(None, None)``.

    Why not the session's ``trust_env``: it looks the proxy up, and reads ``~/.netrc``, in a worker
    thread on *every* request — two thread-pool round trips per request, measured as a third of the
    client's CPU at 1,000 requests/s.
    """
    from aiohttp.helpers import get_env_proxy_for_url  # noqa: PLC0415
    from yarl import URL  # noqa: PLC0415 - aiohttp's own URL type

    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:
        return None, None


class EndpointClient:
    """JSON requests to one endpoint: ``base_url`` (``http://host:8000/v1``) and its server root."""

    def __init__(self, base_url: str, credentials: Credentials, *, connections: int, timeout_s: float,
                 connect_timeout_s: float) -> None:
        parts = urlsplit(strip_userinfo(base_url))
        self._origin, self._path, self._query = (parts.scheme, parts.netloc), parts.path.rstrip("/"), parts.query
        #: the API root without user-info (its query string, if any, is kept apart: see :meth:`url`)
        self.base_url = urlunsplit((*self._origin, self._path, "", ""))
        #: the server's root (vLLM's /tokenize and llama.cpp's /extras live outside /v1)
        self.root = urlunsplit((*self._origin, "", "", ""))
        self.credentials = credentials
        self.connections = connections
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, connect=min(connect_timeout_s, timeout_s))
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def url(self, path: str, *, root: bool = False) -> str:
        """``path`` under the API root (or the server root), with the base URL's query string — some
        gateways take ``?api-version=…`` or a key there — kept on every request."""
        return urlunsplit((*self._origin, ("" if root else self._path) + path, self._query, ""))

    def _open(self) -> aiohttp.ClientSession:
        """The session, created in the running loop (a new loop — another ``asyncio.run`` — gets a
        new one: connections belong to the loop that opened them)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._loop = loop
            proxy, proxy_auth = env_proxy(self.base_url)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections, limit_per_host=0),
                headers={"Authorization": self.credentials.authorization},
                timeout=self.timeout,
                proxy=proxy,
                proxy_auth=proxy_auth,
            )
        return self._session

    async def request(self, method: str, url: str, payload: bytes | None = None, *,
                      timeout: aiohttp.ClientTimeout | None = None, decode: bool = True) -> Any:
        """Send one request; the decoded JSON of a 2xx reply (None with ``decode=False``: only the
        status matters, as for a health check), else :class:`RequestFailed`.

        ``url`` is absolute (``client.url("/chat/completions")``); ``payload`` is the JSON
        body, encoded once by the caller and reused by every retry.
        """
        raw = await self.fetch(method, url, payload, timeout=timeout)
        return decode_json(raw) if decode else None

    async def fetch(self, method: str, url: str, payload: bytes | None = None, *,
                    timeout: aiohttp.ClientTimeout | None = None) -> bytes:
        """Send one request; the body of a 2xx reply, undecoded, else :class:`RequestFailed`."""
        session = self._open()
        try:
            async with session.request(method, url, data=payload, headers=_HEADERS if payload is not None else None,
                                       timeout=timeout or self.timeout) as response:
                raw = await response.read()
                status, headers = response.status, response.headers
        except TimeoutError:
            raise RequestFailed("timeout", retryable=True) from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as err:
            raise RequestFailed("connection error", retryable=True, detail=self._why(err)) from None
        if status >= 400:
            raise self._status_failure(status, headers, raw)
        return raw

    def _status_failure(self, status: int, headers: Mapping[str, str], raw: bytes) -> RequestFailed:
        retry_after = None
        if status in (429, 503):
            retry_after = parse_retry_after(headers.get("Retry-After"))
            if retry_after is None and headers.get("retry-after-ms"):
                retry_after = (parse_retry_after(headers.get("retry-after-ms")) or 0.0) / 1000
        return RequestFailed(f"HTTP {status}", retryable=status in RETRY_STATUSES or status >= 500,
                             detail=one_line(error_message(raw), self.credentials), retry_after_s=retry_after,
                             status=status)

    def _why(self, err: BaseException) -> str | None:
        """What went wrong at the socket level, as specific as the exception allows."""
        os_error = getattr(err, "os_error", None)
        if isinstance(os_error, OSError) and (os_error.errno or os_error.strerror):
            return os.strerror(os_error.errno) if os_error.errno else os_error.strerror
        text = str(err).strip()
        return one_line(f"{type(err).__name__}: {text}" if text else type(err).__name__, self.credentials)

    async def aclose(self) -> None:
        """Close the pool (idempotent)."""
        if self._session is not None and not self._session.closed and self._loop is asyncio.get_running_loop():
            await self._session.close()


def decode_json(raw: bytes) -> Any:
    """A 2xx body as JSON; a body that is not JSON is a retryable failure (a server under load or a
    proxy in between may send anything)."""
    try:
        return json.loads(raw)
    except ValueError:  # UnicodeDecodeError included
        raise RequestFailed("malformed JSON response", retryable=True) from None


def error_message(raw: bytes) -> str | None:
    """The human part of an OpenAI-style error body (``{"error": {"message": ...}}``), else its text."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace") or None
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        if isinstance(message, str):
            return message
    return json.dumps(body, ensure_ascii=False)[:DETAIL_MAX_CHARS]
