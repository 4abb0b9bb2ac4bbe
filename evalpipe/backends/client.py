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
  looked up once per client (:func:`env_proxy`) with the same function the patient-data guard judges
  (:func:`evalpipe.endpoints.proxy_for`), so the proxy checked is the proxy used.
* **Redirects are never followed** (:data:`evalpipe.endpoints.REDIRECTS`): a 3xx would re-send the
  prompt and the Authorization header to whatever host the ``Location`` header names. It is a
  failure that is not retried, naming the target's host (never its user-info or query).
* **Bounded replies**: a body larger than ``max_body_bytes`` is refused while it is read (by its
  ``Content-Length`` when it has one, else as the bytes arrive), never held whole: ``answer too
  large``, not retried. JSON nested deeper than :data:`evalpipe.jsonlimits.MAX_JSON_DEPTH` is refused
  before it is decoded.
* **Failures become :class:`~evalpipe.backends.retry.RequestFailed`**, the one vocabulary the retry
  policy and the error counters know: ``HTTP 429`` (with Retry-After), ``HTTP 500``, ``timeout``,
  ``connection error``, ``malformed JSON response``, ``JSON nested too deep``, ``redirect refused``,
  ``answer too large``. The server's own words are kept as
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
from evalpipe.endpoints import proxy_for, proxy_host
from evalpipe.jsonlimits import TooDeep
from evalpipe.jsonlimits import loads as json_loads

__all__ = ["DEFAULT_MAX_BODY_BYTES", "EndpointClient", "decode_json", "env_proxy", "one_line", "strip_userinfo"]

#: status codes worth another attempt besides 5xx
RETRY_STATUSES = frozenset({408, 409, 429})
DETAIL_MAX_CHARS = 200
_HEADERS = {"Content-Type": "application/json"}
_SURROGATES = re.compile("[\ud800-\udfff]")
#: the largest reply body read (``--max-answer-bytes``): 16 MiB. A generated answer is bounded by
#: max_tokens (32k tokens of text are ~0.2 MB, ~1.2 MB JSON-escaped); the largest honest replies are
#: log-likelihood echoes (every prompt token with its log-probabilities, for each option: ~13 MB for a
#: 32k-token prompt and four options). A 300 MB "answer" is a broken or hostile server.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
_READ_CHUNK = 256 * 1024


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
    by :func:`evalpipe.endpoints.proxy_for` (aiohttp's own helper), or ``(None, None)``.

    Why not the session's ``trust_env``: it looks the proxy up, and reads ``~/.netrc``, in a worker
    thread on *every* request — two thread-pool round trips per request, measured as a third of the
    client's CPU at 1,000 requests/s.
    """
    from yarl import URL  # noqa: PLC0415 - aiohttp's own URL type

    proxy = proxy_for(url)
    if proxy is None:
        return None, None
    parsed = URL(proxy)
    auth = aiohttp.BasicAuth(parsed.user or "", parsed.password or "") if parsed.user is not None else None
    return parsed.with_user(None), auth


class EndpointClient:
    """JSON requests to one endpoint: ``base_url`` (``http://host:8000/v1``) and its server root."""

    def __init__(self, base_url: str, credentials: Credentials, *, connections: int, timeout_s: float,
                 connect_timeout_s: float, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        parts = urlsplit(strip_userinfo(base_url))
        self._origin, self._path, self._query = (parts.scheme, parts.netloc), parts.path.rstrip("/"), parts.query
        #: the API root without user-info (its query string, if any, is kept apart: see :meth:`url`)
        self.base_url = urlunsplit((*self._origin, self._path, "", ""))
        #: the server's root (vLLM's /tokenize and llama.cpp's /extras live outside /v1)
        self.root = urlunsplit((*self._origin, "", "", ""))
        self.credentials = credentials
        self.connections = connections
        self.max_body_bytes = max_body_bytes
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
                                       timeout=timeout or self.timeout, allow_redirects=False) as response:
                status, headers = response.status, response.headers
                if 300 <= status < 400:
                    raise _redirect_failure(status, headers.get("Location"), url)
                raw = await self._read(response)
        except TimeoutError:
            raise RequestFailed("timeout", retryable=True) from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as err:
            raise RequestFailed("connection error", retryable=True, detail=self._why(err)) from None
        if status >= 400:
            raise self._status_failure(status, headers, raw)
        return raw

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        """The body, refused as ``answer too large`` past :attr:`max_body_bytes` — by its declared
        length before anything is read, else as soon as the bytes received pass the limit."""
        limit = self.max_body_bytes
        declared = response.content_length
        if declared is not None:
            if declared > limit:
                raise _too_large(f"the reply declares {declared} bytes", limit)
            return await response.read()  # bounded by its declared length: one read, the fast path
        chunks: list[bytes] = []
        received = 0
        async for chunk in response.content.iter_chunked(_READ_CHUNK):
            received += len(chunk)
            if received > limit:
                raise _too_large(f"the reply passed {limit} bytes", limit)
            chunks.append(chunk)
        return b"".join(chunks)

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


def _too_large(what: str, limit: int) -> RequestFailed:
    return RequestFailed("answer too large", retryable=False,
                         detail=f"{what}; --max-answer-bytes allows {limit} (nothing of it is stored)")


def _redirect_failure(status: int, location: str | None, url: str) -> RequestFailed:
    """A 3xx, refused: its target's host (resolved against the request URL, without user-info, path or
    query) is named so the user can point ``--base-url`` there if they mean to."""
    from urllib.parse import urljoin  # noqa: PLC0415

    target = proxy_host(urljoin(url, location)) if location else None
    where = f"to {target}" if target else "without a Location"
    return RequestFailed("redirect refused", retryable=False, status=status,
                         detail=f"HTTP {status} redirect {where}; evalpipe follows no redirect (it would re-send "
                                "the prompt and the key there): use the final URL as the endpoint")


def decode_json(raw: bytes) -> Any:
    """A 2xx body as JSON; a body that is not JSON is a retryable failure (a server under load or a
    proxy in between may send anything); JSON nested deeper than the one limit
    (:mod:`evalpipe.jsonlimits`) is refused before decoding, and not retried."""
    try:
        return json_loads(raw)
    except TooDeep as deep:
        raise RequestFailed("JSON nested too deep", retryable=False, detail=str(deep)) from None
    except ValueError:  # UnicodeDecodeError included
        raise RequestFailed("malformed JSON response", retryable=True) from None


def error_message(raw: bytes) -> str | None:
    """The human part of an OpenAI-style error body (``{"error": {"message": ...}}``), else its text."""
    try:
        body = json_loads(raw)
    except ValueError:  # TooDeep included: shown as text, cut to a line
        return raw.decode("utf-8", "replace") or None
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        if isinstance(message, str):
            return message
    return json.dumps(body, ensure_ascii=False)[:DETAIL_MAX_CHARS]
