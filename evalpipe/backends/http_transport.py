"""A lean keep-alive HTTP/1.1 transport for the OpenAI SDK's ``httpx2`` client.

Why it exists: at 1,000+ requests/s against a local vLLM or llama.cpp server the client's own CPU
sets the pace. Through the SDK's standard stack (httpx2 → httpcore2 → anyio → h11) an NCBI-sized
chat request costs ~0.8 ms of client CPU, much of it in connection-pool bookkeeping; with this
transport, which speaks HTTP/1.1 directly on an :class:`asyncio.Protocol`, the same request costs
~0.4 ms, SDK included (``bench/throughput.py``).
The SDK above it is unchanged: it still builds the request, adds auth headers, raises its error
classes and reads the :class:`httpx2.Response` we hand back.

What it does, and why:

* **Plain ``http://`` only.** Anything else (``https://``, reached e.g. through a redirect) goes
  to a standard :class:`httpx2.AsyncHTTPTransport`, created on first use (it uses no proxy: an
  inference server is not expected to redirect to ``https://``). :func:`make_async_client` uses
  this transport only for an ``http://`` base URL with no HTTP proxy configured in the
  environment (``HTTP_PROXY``/``ALL_PROXY``, any case); otherwise it returns the SDK's standard
  client, which applies the proxy and ``NO_PROXY`` rules itself.
* **Keep-alive pool per (host, port), bounded.** At most ``max_connections`` connections per
  origin; a request that finds all of them busy waits (``pool`` timeout → :class:`httpx2.PoolTimeout`).
  Idle connections are reused most-recent-first. A connection is never polled: the event loop
  reports a server's close of an idle socket (``eof_received``/``connection_lost``) as it happens,
  so a dead connection is skipped at no cost. Idle connections older than ``keepalive_expiry``
  are closed (servers and NATs drop idle sockets silently).
* **One retry on a stale connection.** The close of an idle socket can still cross our request on
  the wire. When a *reused* connection fails (write error, reset, or end of stream) before a single
  byte of the response arrived, the request is sent once more on a fresh connection. The server
  sent nothing back, so at most it saw a request it did not answer, and a completion request has
  no effect beyond compute; the backend's own policy would retry such a connection error anyway,
  this only spares it a failed attempt and a backoff. A fresh connection that fails, or any
  failure after response bytes arrived, is not retried here: it is an error for the caller's
  retry policy to classify.
* **Errors are httpx2's classes**, so code that classifies failures (the SDK, then
  :mod:`evalpipe.backends.openai_compat`) works unchanged: :class:`httpx2.ConnectError`,
  :class:`httpx2.ConnectTimeout`, :class:`httpx2.ReadTimeout` (no byte for ``read`` seconds),
  :class:`httpx2.WriteTimeout`, :class:`httpx2.ReadError` (reset mid-response),
  :class:`httpx2.RemoteProtocolError` (closed mid-response or malformed response).
* **Framing:** ``Content-Length`` and ``chunked`` responses; a response with neither is read until
  the server closes. ``1xx`` interim responses are skipped; ``HEAD``, ``204`` and ``304`` have no
  body. ``Connection: close`` (either side), or an HTTP/1.0 reply without ``Connection:
  keep-alive``, closes the connection after the response.
* **Bodies are read in full** before the response is returned (evalpipe never streams). A
  streamed response (server-sent events) still works, but arrives all at once. The body is
  handed to httpx2 raw, so ``Content-Encoding`` (gzip …) is decoded by httpx2 as usual.

Use one transport inside one event loop (its connections belong to that loop), and close it
(``await client.aclose()``) at the end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import httpx2

__all__ = ["KeepAliveTransport", "make_async_client", "proxy_configured", "uses_keepalive_transport"]

#: limit on a response's status line + headers; more is a broken or hostile server
_MAX_HEAD_BYTES = 64 * 1024
#: limit on one chunk-size line (hex digits plus extensions)
_MAX_CHUNK_LINE = 4096
_DEFAULT_PORT = 80
#: RFC 8305's recommended delay before racing the next address of a host name
_HAPPY_EYEBALLS_DELAY_S = 0.25
_NO_BODY_STATUSES = frozenset({204, 304})


def proxy_configured() -> bool:
    """Whether the environment sets a proxy for plain-HTTP requests (``HTTP_PROXY``/``ALL_PROXY``)."""
    proxies = urllib.request.getproxies_environment()
    return bool(proxies.get("http") or proxies.get("all"))


def uses_keepalive_transport(base_url: str) -> bool:
    """Whether :func:`make_async_client` would use :class:`KeepAliveTransport` for ``base_url``."""
    return urllib.parse.urlsplit(base_url).scheme.lower() == "http" and not proxy_configured()


def make_async_client(
    base_url: str,
    *,
    timeout: httpx2.Timeout,
    max_connections: int,
    verify: ssl.SSLContext | bool = True,
    follow_redirects: bool = True,
    keepalive_expiry: float = 5.0,
) -> httpx2.AsyncClient:
    """An :class:`httpx2.AsyncClient` for the OpenAI SDK: on :class:`KeepAliveTransport` when
    :func:`uses_keepalive_transport` allows, else the standard one with the same pool bounds."""
    if uses_keepalive_transport(base_url):
        transport = KeepAliveTransport(max_connections=max_connections, keepalive_expiry=keepalive_expiry, verify=verify)
        return httpx2.AsyncClient(transport=transport, timeout=timeout, follow_redirects=follow_redirects)
    limits = httpx2.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=keepalive_expiry
    )
    return httpx2.AsyncClient(timeout=timeout, limits=limits, follow_redirects=follow_redirects, verify=verify)


# --------------------------------------------------------------------------------------------
# Response parsing


class _Malformed(Exception):
    """The server's bytes are not a valid HTTP/1.1 response."""


class _Closed(Exception):
    """The connection ended before the response was complete; ``nothing_received`` says whether
    any response byte had arrived (only then is a retry safe)."""

    def __init__(self, message: str, *, nothing_received: bool, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.nothing_received = nothing_received
        self.cause = cause


_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILERS, _UNTIL_CLOSE, _DONE = range(8)


class _ResponseParser:
    """Incremental parser for one HTTP/1.x response: ``feed`` bytes until it returns True."""

    __slots__ = (
        "_buf", "_no_body", "_remaining", "_state", "body", "headers", "keep_alive", "reason", "received", "status",
    )

    def __init__(self, *, no_body: bool) -> None:
        self._no_body = no_body  # a HEAD request: whatever the headers say, no body follows
        self._buf = bytearray()
        self._state = _HEAD
        self._remaining = 0
        self.received = 0
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.keep_alive = True

    def feed(self, data: bytes) -> bool:
        """Consume ``data``; True once the response is complete. Raises :class:`_Malformed`."""
        self.received += len(data)
        state = self._state
        if state == _LENGTH and not self._buf:  # the common case: body bytes straight through
            return self._take_length(data)
        if state == _UNTIL_CLOSE:
            self.body.append(data)
            return False
        if state == _DONE:
            self.keep_alive = False  # bytes after the response: the connection's framing is lost
            return True
        self._buf += data
        return self._advance()

    def eof(self) -> bool:
        """The server closed; True if that completes the response (a read-until-close body)."""
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
            return True
        return self._state == _DONE

    def _take_length(self, data: bytes) -> bool:
        if len(data) < self._remaining:
            self.body.append(data)
            self._remaining -= len(data)
            return False
        if len(data) > self._remaining:
            data = data[: self._remaining]
            self.keep_alive = False
        self.body.append(data)
        self._remaining = 0
        self._state = _DONE
        return True

    def _advance(self) -> bool:
        buf = self._buf
        while True:
            state = self._state
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > _MAX_HEAD_BYTES:
                        raise _Malformed(f"response head longer than {_MAX_HEAD_BYTES} bytes")
                    return False
                head = bytes(buf[:end])
                del buf[: end + 4]
                self._parse_head(head)
            elif state == _LENGTH:
                data = bytes(buf)
                buf.clear()
                return self._take_length(data) if data else False
            elif state == _UNTIL_CLOSE:
                if buf:
                    self.body.append(bytes(buf))
                    buf.clear()
                return False
            elif state == _CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > _MAX_CHUNK_LINE:
                        raise _Malformed("chunk-size line too long")
                    return False
                size_text = bytes(buf[:end]).split(b";", 1)[0].strip()
                del buf[: end + 2]
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise _Malformed(f"bad chunk size {size_text[:40]!r}") from None
                if size < 0 or not size_text.isalnum():
                    raise _Malformed(f"bad chunk size {size_text[:40]!r}")
                self._remaining = size
                self._state = _CHUNK_DATA if size else _TRAILERS
            elif state == _CHUNK_DATA:
                if not buf:
                    return False
                take = min(self._remaining, len(buf))
                self.body.append(bytes(buf[:take]))
                del buf[:take]
                self._remaining -= take
                if self._remaining:
                    return False
                self._state = _CHUNK_CRLF
            elif state == _CHUNK_CRLF:
                if len(buf) < 2:
                    return False
                if buf[:2] != b"\r\n":
                    raise _Malformed("chunk data not followed by CRLF")
                del buf[:2]
                self._state = _CHUNK_SIZE
            elif state == _TRAILERS:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > _MAX_HEAD_BYTES:
                        raise _Malformed("trailer section too long")
                    return False
                del buf[: end + 2]
                if end == 0:  # the empty line that ends the message
                    self._state = _DONE
            else:  # _DONE
                if buf:
                    self.keep_alive = False
                    buf.clear()
                return True

    def _parse_head(self, head: bytes) -> None:
        """Status line and headers; sets the body framing. A 1xx response is dropped whole."""
        status_line, *lines = head.split(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
            raise _Malformed(f"bad status line {status_line[:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200:
            if status == 101:
                raise _Malformed("unexpected 101 Switching Protocols")
            return  # interim response (100 Continue, 103 Early Hints): the real one follows
        headers: list[tuple[bytes, bytes]] = []
        length: int | None = None
        chunked = False
        has_transfer_encoding = False
        close = parts[0] != b"HTTP/1.1"
        for line in lines:
            if line[:1] in (b" ", b"\t"):  # obsolete line folding: continues the previous value
                if not headers:
                    raise _Malformed("header continuation before any header")
                name, value = headers[-1]
                headers[-1] = (name, value + b" " + line.strip(b" \t"))
                continue
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise _Malformed(f"bad header line {line[:80]!r}")
            value = value.strip(b" \t")
            headers.append((name, value))
            lower = name.lower()
            if lower == b"content-length":
                if not value.isdigit() or (length is not None and int(value) != length):
                    raise _Malformed(f"bad Content-Length {value[:40]!r}")
                length = int(value)
            elif lower == b"transfer-encoding":
                has_transfer_encoding = True
                chunked = value.rsplit(b",", 1)[-1].strip().lower() == b"chunked"
            elif lower == b"connection":
                tokens = {token.strip().lower() for token in value.split(b",")}
                if b"close" in tokens:
                    close = True
                elif b"keep-alive" in tokens and parts[0] == b"HTTP/1.0":
                    close = False
        self.status = status
        self.reason = parts[2] if len(parts) > 2 else b""
        self.headers = headers
        if close:
            self.keep_alive = False
        if self._no_body or status in _NO_BODY_STATUSES:
            self._state = _DONE
        elif chunked:
            self._state = _CHUNK_SIZE
        elif has_transfer_encoding or length is None:
            self._state = _UNTIL_CLOSE  # RFC 9112 §6.3: the body runs to the end of the connection
            self.keep_alive = False
        else:
            self._remaining = length
            self._state = _LENGTH if length else _DONE


# --------------------------------------------------------------------------------------------
# One connection


class _Connection(asyncio.Protocol):
    """One TCP connection: writes a request, parses the reply in ``data_received``, and completes
    a future when the response is whole (no reader task, no per-chunk coroutine wake-ups)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser: _ResponseParser | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._last_read = 0.0
        self._read_timeout: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._drain: asyncio.Future[None] | None = None
        self._write_paused = False

    # -- asyncio.Protocol callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:  # unsolicited bytes on an idle connection: its framing is lost
            self.close()
            return
        self._last_read = self._loop.time()
        try:
            done = parser.feed(data)
        except _Malformed as exc:
            self._fail(httpx2.RemoteProtocolError(f"malformed HTTP response: {exc}"))
            self.close()
            return
        if done:
            self._finish()

    def eof_received(self) -> bool:
        self._ended(None)
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._ended(exc)
        drain = self._drain
        if drain is not None and not drain.done():
            drain.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        drain = self._drain
        if drain is not None and not drain.done():
            drain.set_result(None)

    # -- one exchange ---------------------------------------------------------------------------

    async def exchange(
        self, payload: bytes, *, no_body: bool, read_timeout: float | None, write_timeout: float | None
    ) -> _ResponseParser:
        """Send one request and wait for its whole response. Raises :class:`_Closed` when the
        connection ends early, or an httpx2 error."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise _Closed("connection already closed", nothing_received=True)
        parser = _ResponseParser(no_body=no_body)
        waiter = self._loop.create_future()
        self._parser, self._waiter = parser, waiter
        try:
            self.transport.write(payload)
            if self._write_paused:
                await self._wait_drained(write_timeout)
            self._last_read = self._loop.time()
            self._read_timeout = read_timeout
            if read_timeout is not None:
                self._timer = self._loop.call_at(self._last_read + read_timeout, self._check_read_timeout)
            await waiter
            return parser
        finally:
            self._parser = self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    async def _wait_drained(self, write_timeout: float | None) -> None:
        self._drain = self._loop.create_future()
        try:
            async with asyncio.timeout(write_timeout):
                await self._drain
        except TimeoutError:
            raise httpx2.WriteTimeout(f"request not written within {write_timeout} s") from None
        finally:
            self._drain = None

    def _waiter_done(self) -> bool:
        return self._waiter is None or self._waiter.done()

    def _check_read_timeout(self) -> None:
        """Fire ReadTimeout after ``read`` seconds without a byte (httpx2's meaning of ``read``)."""
        self._timer = None
        timeout = self._read_timeout
        if self._waiter is None or self._waiter.done() or timeout is None:
            return
        due = self._last_read + timeout
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._check_read_timeout)
            return
        self._fail(httpx2.ReadTimeout(f"no response data for {timeout:g} s"))

    def _finish(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _ended(self, exc: BaseException | None) -> None:
        """End of stream or connection lost: complete a read-until-close body, else fail the exchange."""
        self.closed = True
        parser = self._parser
        if parser is None or self._waiter_done():
            return
        if parser.eof():
            self._finish()
            return
        if parser.received == 0:
            message = "Server disconnected without sending a response."
            self._fail(_Closed(message, nothing_received=True, cause=exc))
        elif exc is not None:
            self._fail(httpx2.ReadError(f"connection lost mid-response: {exc}"))
        else:
            self._fail(httpx2.RemoteProtocolError("peer closed connection without sending complete message body"))

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


# --------------------------------------------------------------------------------------------
# The pool of one origin


class _Pool:
    """Connections to one (host, port): at most ``limit``, idle ones reused most-recent-first."""

    def __init__(self, limit: int, keepalive_expiry: float) -> None:
        self.limit = limit
        self.keepalive_expiry = keepalive_expiry
        self.idle: list[_Connection] = []
        self.live: set[_Connection] = set()
        self.slots = 0  # connections open or being opened
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def acquire(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> _Connection | None:
        """An idle connection, or None: the caller holds a new slot and opens the connection."""
        while True:
            conn = self._pop_idle(loop)
            if conn is not None:
                return conn
            if self.slots < self.limit:
                self.slots += 1
                return None
            waiter = loop.create_future()
            self.waiters.append(waiter)
            try:
                async with asyncio.timeout(timeout):
                    await waiter
            except BaseException as exc:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken, but leaving (cancelled, timed out): pass the turn on
                else:
                    waiter.cancel()
                    with contextlib.suppress(ValueError):  # _wake may have dropped it already
                        self.waiters.remove(waiter)
                if isinstance(exc, TimeoutError):
                    raise httpx2.PoolTimeout(f"no connection free within {timeout} s") from None
                raise

    def _pop_idle(self, loop: asyncio.AbstractEventLoop) -> _Connection | None:
        idle = self.idle
        if not idle:
            return None
        oldest_allowed = loop.time() - self.keepalive_expiry
        while idle and idle[0].idle_since < oldest_allowed:  # expired ones gather at the front
            self.discard(idle.pop(0), wake=False)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
            self.discard(conn, wake=False)
        return None

    def add(self, conn: _Connection) -> None:
        self.live.add(conn)

    def release(self, conn: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        """Put a connection whose exchange completed back for reuse."""
        conn.idle_since = loop.time()
        self.idle.append(conn)
        self._wake()

    def forget(self, conn: _Connection) -> None:
        """Close a connection but keep its slot (the caller opens another one in it)."""
        conn.close()
        self.live.discard(conn)

    def discard(self, conn: _Connection | None, *, wake: bool = True) -> None:
        """Close a connection (None: a slot whose connection never opened) and free its slot."""
        if conn is not None:
            self.forget(conn)
        self.slots -= 1
        if wake:
            self._wake()

    def _wake(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for conn in list(self.live):
            conn.close()
        self.live.clear()
        self.idle.clear()
        self.slots = 0


# --------------------------------------------------------------------------------------------
# The transport


class _Body(httpx2.AsyncByteStream):
    """An already-received response body."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._data


class KeepAliveTransport(httpx2.AsyncBaseTransport):
    """httpx2 transport: keep-alive HTTP/1.1 over asyncio for ``http://``; see the module docstring.

    ``max_connections`` bounds each origin's pool; ``keepalive_expiry`` closes connections idle
    longer; ``verify`` configures the fallback transport used for other schemes (``https://``),
    unless ``fallback`` gives one.
    """

    def __init__(
        self,
        *,
        max_connections: int = 100,
        keepalive_expiry: float = 5.0,
        verify: ssl.SSLContext | bool = True,
        fallback: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1 (got {max_connections})")
        self.max_connections = max_connections
        self.keepalive_expiry = keepalive_expiry
        self._verify = verify
        self._pools: dict[tuple[str, int], _Pool] = {}
        self._fallback = fallback
        self._closed = False
        #: connections opened so far (for tests and diagnostics)
        self.connections_opened = 0
        #: requests re-sent after a reused connection turned out to be closed
        self.stale_retries = 0

    def _fallback_transport(self) -> httpx2.AsyncBaseTransport:
        if self._fallback is None:
            limits = httpx2.Limits(
                max_connections=self.max_connections,
                max_keepalive_connections=self.max_connections,
                keepalive_expiry=self.keepalive_expiry,
            )
            self._fallback = httpx2.AsyncHTTPTransport(verify=self._verify, limits=limits)
        return self._fallback

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        if url.scheme != "http":
            return await self._fallback_transport().handle_async_request(request)
        if self._closed:
            raise httpx2.ConnectError("the transport is closed", request=request)
        host = url.host
        port = url.port or _DEFAULT_PORT
        pool = self._pools.get((host, port))
        if pool is None:
            pool = self._pools[(host, port)] = _Pool(self.max_connections, self.keepalive_expiry)
        payload, asks_close = await _serialize(request)
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        no_body = request.method == "HEAD"
        loop = asyncio.get_running_loop()

        conn = await pool.acquire(loop, timeouts.get("pool"))
        retried = False
        while True:
            reused = conn is not None
            if conn is None:
                try:
                    conn = await self._connect(loop, host, port, timeouts.get("connect"), request)
                except BaseException:
                    pool.discard(None)
                    raise
                pool.add(conn)
            try:
                parser = await conn.exchange(
                    payload, no_body=no_body, read_timeout=timeouts.get("read"), write_timeout=timeouts.get("write")
                )
            except _Closed as exc:
                if reused and exc.nothing_received and not retried:
                    retried = True
                    self.stale_retries += 1
                    pool.forget(conn)  # its slot stays ours: the retry opens a fresh connection in it
                    conn = None
                    continue
                pool.discard(conn)
                raise _closed_error(exc, request) from exc.cause
            except httpx2.HTTPError as exc:
                pool.discard(conn)
                exc.request = request
                raise
            except BaseException:  # cancelled mid-exchange: the connection's state is unknown
                pool.discard(conn)
                raise
            break

        if parser.keep_alive and not conn.closed and not asks_close:
            pool.release(conn, loop)
        else:
            pool.discard(conn)
        return httpx2.Response(
            parser.status,
            headers=parser.headers,
            stream=_Body(b"".join(parser.body)),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": parser.reason},
        )

    async def _connect(
        self, loop: asyncio.AbstractEventLoop, host: str, port: int, timeout: float | None, request: httpx2.Request
    ) -> _Connection:
        conn = _Connection(loop)
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(
                    lambda: conn, host, port, happy_eyeballs_delay=_HAPPY_EYEBALLS_DELAY_S
                )
        except TimeoutError:
            conn.close()
            raise httpx2.ConnectTimeout(f"connecting to {host}:{port} timed out", request=request) from None
        except OSError as exc:
            raise httpx2.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        self.connections_opened += 1
        return conn

    async def aclose(self) -> None:
        """Close every connection (idle and busy) and the fallback transport."""
        self._closed = True
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        if self._fallback is not None:
            await self._fallback.aclose()
            self._fallback = None
        await asyncio.sleep(0)  # let the transports' connection_lost callbacks run


async def _serialize(request: httpx2.Request) -> tuple[bytes, bool]:
    """The request's bytes (request line, headers as httpx2 built them, body) and whether it
    asks for ``Connection: close``; one pass over the headers."""
    try:
        body = request.content
    except httpx2.RequestNotRead:
        body = await request.aread()
    lines = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), request.url.raw_path)]
    chunked = close = False
    for name, value in request.headers.raw:
        lines.append(b"%s: %s\r\n" % (name, value))
        lower = name.lower()
        if lower == b"transfer-encoding":
            chunked = True
        elif lower == b"connection" and b"close" in value.lower():
            close = True
    lines.append(b"\r\n")
    if chunked:  # a streamed upload, now read in full: send it as one chunk
        body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    lines.append(body)
    return b"".join(lines), close


def _closed_error(exc: _Closed, request: httpx2.Request) -> httpx2.HTTPError:
    """A connection that ended before any response byte, as httpx2 reports it."""
    if isinstance(exc.cause, OSError):
        return httpx2.ReadError(f"{exc}: {exc.cause}", request=request)
    return httpx2.RemoteProtocolError(str(exc), request=request)
