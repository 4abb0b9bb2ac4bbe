"""KeepAliveTransport: HTTP/1.1 framing, pooling, stale-connection retry, errors and fallbacks.

Two kinds of server: the fake OpenAI server (tests.support.fake_openai) where its faults fit,
and a raw asyncio server scripted per test where the point is exact bytes on the wire (chunk
boundaries, a close at a chosen moment, a proxy, a TLS handshake). The response parser is also
fed byte by byte, so no framing decision depends on how TCP happened to cut the stream.

pytest-asyncio is not a dependency, so each test drives its coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx2
import pytest

from evalpipe.backends.http_transport import (
    KeepAliveTransport,
    _Malformed,
    _Pool,
    _ResponseParser,
    make_async_client,
    uses_keepalive_transport,
)
from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
from evalpipe.records import GenerationParams, Message, Prompt
from tests.support.fake_openai import FakeOpenAIServer

T = TypeVar("T")
MODEL = "m"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy")
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(models=(MODEL,)) as srv:
        yield srv


def chat_body(text: str = "Text to process:\nFabry disease") -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 16}


def lean_client(transport: KeepAliveTransport, timeout: float = 2.0) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=transport, timeout=timeout)


async def post_chat(client: httpx2.AsyncClient, url: str, text: str = "Text to process:\nFabry disease") -> httpx2.Response:
    return await client.post(f"{url}/chat/completions", json=chat_body(text))


def answer(response: httpx2.Response) -> str:
    return response.json()["choices"][0]["message"]["content"]


# ---------------------------------------------------------------------------------------------
# A raw loopback server, scripted per test


@contextlib.asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[int]:
    """Serve every connection with ``handler`` in the running loop; yields the port."""
    tasks: set[asyncio.Task[None]] = set()

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            tasks.discard(task)
            writer.transport.abort()

    srv = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1]
    finally:
        srv.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and body (Content-Length bodies only)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, (await reader.readexactly(length) if length else b"")


def reply(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# ---------------------------------------------------------------------------------------------
# The response parser, byte by byte


def parse_bytewise(raw: bytes, *, no_body: bool = False) -> _ResponseParser:
    """Feed one byte at a time; the response must complete exactly at the last byte."""
    parser = _ResponseParser(no_body=no_body)
    for i in range(len(raw)):
        done = parser.feed(raw[i : i + 1])
        assert done == (i == len(raw) - 1), f"completion at byte {i} of {len(raw)}"
    return parser


def test_parser_content_length_bytewise() -> None:
    parser = parse_bytewise(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  padded \r\n\r\nhello")
    assert (parser.status, parser.reason, b"".join(parser.body)) == (200, b"OK", b"hello")
    assert parser.headers == [(b"Content-Length", b"5"), (b"X-A", b"padded")]
    assert parser.keep_alive


def test_parser_chunked_with_extensions_and_trailers_bytewise() -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n"
        b"A\r\n, chunked!\r\n"  # 10 bytes, upper-case hex
        b"0\r\nX-Trailer: yes\r\n\r\n"
    )
    parser = parse_bytewise(raw)
    assert b"".join(parser.body) == b"hello, chunked!"
    assert parser.keep_alive


def test_parser_chunked_in_one_piece() -> None:
    parser = _ResponseParser(no_body=False)
    assert parser.feed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
    assert b"".join(parser.body) == b"abc"


def test_parser_skips_interim_responses_and_knows_bodiless_ones() -> None:
    parser = parse_bytewise(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert parser.status == 200 and b"".join(parser.body) == b"ok"
    # 204 and HEAD: no body whatever Content-Length says
    assert parse_bytewise(b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n").body == []
    assert parse_bytewise(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", no_body=True).body == []


def test_parser_until_close_body_and_connection_close() -> None:
    parser = _ResponseParser(no_body=False)
    assert not parser.feed(b"HTTP/1.0 200 OK\r\n\r\nfirst ")
    assert not parser.feed(b"second")
    assert parser.eof()  # the close ends the body
    assert b"".join(parser.body) == b"first second" and not parser.keep_alive

    closing = parse_bytewise(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx")
    assert not closing.keep_alive
    assert not parse_bytewise(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx").keep_alive
    assert parse_bytewise(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx").keep_alive


def test_parser_extra_bytes_after_the_response_end_keep_alive() -> None:
    parser = _ResponseParser(no_body=False)
    assert parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokGARBAGE")
    assert b"".join(parser.body) == b"ok" and not parser.keep_alive


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTQ/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naXX",
    ],
)
def test_parser_rejects_malformed_responses(raw: bytes) -> None:
    with pytest.raises(_Malformed):
        _ResponseParser(no_body=False).feed(raw)


# ---------------------------------------------------------------------------------------------
# Against the fake OpenAI server


def test_pooled_connections_are_reused(server: FakeOpenAIServer) -> None:
    async def main() -> KeepAliveTransport:
        transport = KeepAliveTransport(max_connections=4)
        async with lean_client(transport) as client:
            for i in range(10):  # one after another: one connection
                assert (await post_chat(client, server.url, f"Text to process:\ns{i}")).status_code == 200
            assert server.connections == 1
            server.latency = 0.05
            responses = await asyncio.gather(*(post_chat(client, server.url, f"Text to process:\nc{i}") for i in range(12)))
        assert [answer(r) for r in responses] == [f"<response>c{i}</response>" for i in range(12)]
        return transport

    transport = run(main())
    # 12 at once on a pool of 4: never more than 4 connections or 4 in flight
    assert server.connections == 4 and transport.connections_opened == 4
    assert server.max_in_flight == 4
    assert server.total_requests == 22


def test_chunked_response_through_the_backend(server: FakeOpenAIServer) -> None:
    text = "Text to process:\n" + "A long sentence about cystic fibrosis. " * 10  # several 64-byte chunks
    server.plan_faults(["chunked"], count=2)

    async def main() -> tuple[str | None, int]:
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model=MODEL, concurrency=2))
        prompt = Prompt(params=GenerationParams(max_tokens=64), messages=(Message("user", text),))
        try:
            first = await backend.complete(prompt)
            second = await backend.complete(prompt)
        finally:
            await backend.aclose()
        assert first.text == second.text
        return first.text, second.attempts

    got, attempts = run(main())
    assert got == "<response>" + ("A long sentence about cystic fibrosis. " * 10).strip() + "</response>"
    assert attempts == 1
    assert server.stats()["faults_injected"] == {"chunked": 2}
    assert server.connections == 1  # a chunked response leaves the connection reusable


def test_stale_pooled_connection_is_retried_once_on_a_fresh_one(server: FakeOpenAIServer) -> None:
    async def main() -> tuple[str, KeepAliveTransport]:
        transport = KeepAliveTransport(max_connections=2)
        async with lean_client(transport) as client:
            await post_chat(client, server.url)  # leaves a pooled connection
            server.plan_faults(["drop"])  # the pooled connection dies without a response byte
            response = await post_chat(client, server.url, "Text to process:\nagain")
        return answer(response), transport

    text, transport = run(main())
    assert text == "<response>again</response>"
    assert transport.stale_retries == 1
    assert server.total_requests == 3 and server.connections == 2


def test_a_fresh_connection_that_drops_is_not_retried(server: FakeOpenAIServer) -> None:
    server.plan_faults(["drop"])

    async def main() -> None:
        transport = KeepAliveTransport(max_connections=2)
        async with lean_client(transport) as client:
            with pytest.raises(httpx2.RemoteProtocolError, match="without sending a response"):
                await post_chat(client, server.url)
        assert transport.stale_retries == 0

    run(main())
    assert server.total_requests == 1


def test_a_second_drop_after_the_stale_retry_is_an_error(server: FakeOpenAIServer) -> None:
    async def main() -> KeepAliveTransport:
        transport = KeepAliveTransport(max_connections=2)
        async with lean_client(transport) as client:
            await post_chat(client, server.url)
            server.plan_faults(["drop"], count=2)
            with pytest.raises(httpx2.RemoteProtocolError):
                await post_chat(client, server.url)
        return transport

    transport = run(main())
    assert transport.stale_retries == 1  # once, never twice
    assert server.total_requests == 3


def test_server_closing_mid_body_is_an_error_not_a_retry(server: FakeOpenAIServer) -> None:
    async def main() -> KeepAliveTransport:
        transport = KeepAliveTransport(max_connections=2)
        async with lean_client(transport) as client:
            await post_chat(client, server.url)
            server.plan_faults(["drop_mid"])  # headers and half the body, then close
            with pytest.raises(httpx2.RemoteProtocolError, match="complete message body"):
                await post_chat(client, server.url)
            # the broken connection is gone; the next request opens a new one
            assert answer(await post_chat(client, server.url, "Text to process:\nok")) == "<response>ok</response>"
        return transport

    transport = run(main())
    assert transport.stale_retries == 0
    assert server.total_requests == 3 and server.connections == 2


def test_read_timeout_is_httpx_read_timeout(server: FakeOpenAIServer) -> None:
    server.plan_faults(["slow:3"])

    async def main() -> float:
        async with lean_client(KeepAliveTransport(max_connections=1), timeout=0.25) as client:
            started = time.perf_counter()
            with pytest.raises(httpx2.ReadTimeout):
                await post_chat(client, server.url)
            elapsed = time.perf_counter() - started
            # the timed-out connection is not reused (its reply may still come), the slot is free
            assert (await post_chat(client, server.url)).status_code == 200
        return elapsed

    elapsed = run(main())
    assert 0.2 <= elapsed < 1.5
    assert server.connections == 2


def test_per_request_timeout_overrides_the_client_default(server: FakeOpenAIServer) -> None:
    server.plan_faults(["slow:3"])

    async def main() -> float:
        async with lean_client(KeepAliveTransport(max_connections=1), timeout=30.0) as client:
            started = time.perf_counter()
            with pytest.raises(httpx2.ReadTimeout):
                await client.post(f"{server.url}/chat/completions", json=chat_body(), timeout=0.2)
            return time.perf_counter() - started

    assert run(main()) < 1.5


def test_retry_after_and_other_headers_are_visible(server: FakeOpenAIServer) -> None:
    server.plan_faults(["429:retry_after=7"])

    async def main() -> httpx2.Response:
        async with lean_client(KeepAliveTransport()) as client:
            return await post_chat(client, server.url)

    response = run(main())
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_request_connection_close_is_honoured(server: FakeOpenAIServer) -> None:
    async def main() -> None:
        async with lean_client(KeepAliveTransport()) as client:
            for _ in range(3):
                response = await client.post(
                    f"{server.url}/chat/completions", json=chat_body(), headers={"Connection": "close"}
                )
                assert response.status_code == 200

    run(main())
    assert server.connections == 3


def test_cancelled_request_frees_its_slot(server: FakeOpenAIServer) -> None:
    server.plan_faults(["slow:3"])

    async def main() -> None:
        async with lean_client(KeepAliveTransport(max_connections=1), timeout=5.0) as client:
            slow = asyncio.ensure_future(post_chat(client, server.url))
            await asyncio.sleep(0.1)
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            # with a leaked slot this would wait for the pool forever
            response = await asyncio.wait_for(post_chat(client, server.url), 2.0)
            assert response.status_code == 200

    run(main())
    assert server.connections == 2


def test_pool_timeout_when_every_connection_is_busy(server: FakeOpenAIServer) -> None:
    server.latency = 0.5

    async def main() -> None:
        timeout = httpx2.Timeout(5.0, pool=0.1)
        async with httpx2.AsyncClient(transport=KeepAliveTransport(max_connections=1), timeout=timeout) as client:
            busy = asyncio.ensure_future(post_chat(client, server.url))
            await asyncio.sleep(0.05)
            with pytest.raises(httpx2.PoolTimeout):
                await post_chat(client, server.url)
            assert (await busy).status_code == 200

    run(main())


def test_a_woken_pool_waiter_that_is_cancelled_passes_its_turn_on() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        pool = _Pool(1, keepalive_expiry=5.0)
        assert await pool.acquire(loop, None) is None  # holds the only slot
        second = asyncio.ensure_future(pool.acquire(loop, None))
        third = asyncio.ensure_future(pool.acquire(loop, None))
        await asyncio.sleep(0)  # both wait
        pool.discard(None)  # the slot frees up and the second waiter is woken ...
        second.cancel()  # ... but cancelled before it could take it
        with pytest.raises(asyncio.CancelledError):
            await second
        assert await asyncio.wait_for(third, 1.0) is None  # the third gets the slot

    run(main())


def test_refused_connection_is_connect_error_and_frees_the_slot() -> None:
    async def main() -> None:
        srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        srv.close()
        await srv.wait_closed()
        async with lean_client(KeepAliveTransport(max_connections=1)) as client:
            for _ in range(2):  # the second would be a PoolTimeout if the first leaked its slot
                with pytest.raises(httpx2.ConnectError):
                    await client.get(f"http://127.0.0.1:{port}/v1/models")

    run(main())


# ---------------------------------------------------------------------------------------------
# Exact bytes on the wire (raw server)


def test_idle_connection_closed_by_the_server_is_skipped_without_a_retry() -> None:
    """A keep-alive timeout on the server: the loop reports the close, the next request connects."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(reply(b"{}", "Content-Type: application/json"))
        await writer.drain()
        await asyncio.sleep(0.05)  # then the server's idle timeout closes it

    async def main() -> KeepAliveTransport:
        transport = KeepAliveTransport()
        async with raw_server(handler) as port, lean_client(transport) as client:
            for _ in range(2):
                assert (await client.get(f"http://127.0.0.1:{port}/x")).status_code == 200
                await asyncio.sleep(0.2)
        return transport

    transport = run(main())
    assert connections == 2 and transport.stale_retries == 0


def test_request_connection_close_is_honoured_even_if_the_server_keeps_alive() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:  # answers keep-alive style whatever the request said
            await read_request(reader)
            writer.write(reply(b"{}"))
            await writer.drain()

    async def main() -> None:
        async with raw_server(handler) as port, lean_client(KeepAliveTransport()) as client:
            for _ in range(2):
                await client.get(f"http://127.0.0.1:{port}/", headers={"Connection": "close"})

    run(main())
    assert connections == 2


def test_unsolicited_bytes_on_an_idle_connection_retire_it() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(reply(b"first"))
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(reply(b"nobody asked"))  # would be taken as the next reply on this connection
        await writer.drain()
        await read_request(reader)
        writer.write(reply(b"wrong connection"))
        await writer.drain()
        await asyncio.sleep(1)

    async def main() -> list[bytes]:
        async with raw_server(handler) as port, lean_client(KeepAliveTransport()) as client:
            first = (await client.get(f"http://127.0.0.1:{port}/")).content
            await asyncio.sleep(0.1)
            return [first, (await client.get(f"http://127.0.0.1:{port}/")).content]

    assert run(main()) == [b"first", b"first"]
    assert connections == 2


def test_chunks_split_across_writes_and_response_connection_close() -> None:
    seen_connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal seen_connections
        seen_connections += 1
        while True:
            await read_request(reader)
            for piece in (b"HTTP/1.1 200 OK\r\nTransfer-", b"Encoding: chunked\r\nConnection: close\r\n\r\n4\r",
                          b"\nwiki\r\n5\r\npedia\r", b"\n0\r\n", b"\r\n"):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.01)

    async def main() -> list[bytes]:
        async with raw_server(handler) as port, lean_client(KeepAliveTransport()) as client:
            return [(await client.get(f"http://127.0.0.1:{port}/")).content for _ in range(2)]

    assert run(main()) == [b"wikipedia", b"wikipedia"]
    assert seen_connections == 2  # "Connection: close" in the response: no reuse


def test_body_until_close_and_gzip_content_encoding() -> None:
    payload = json.dumps({"ok": True}).encode()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        if head.startswith(b"GET /gzip"):
            writer.write(reply(gzip.compress(payload), "Content-Encoding: gzip"))
            await writer.drain()
            return
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nread until ")
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"the end")
        await writer.drain()
        writer.close()

    async def main() -> tuple[bytes, Any]:
        async with raw_server(handler) as port, lean_client(KeepAliveTransport()) as client:
            plain = (await client.get(f"http://127.0.0.1:{port}/plain")).content
            zipped = (await client.get(f"http://127.0.0.1:{port}/gzip")).json()
            return plain, zipped

    assert run(main()) == (b"read until the end", {"ok": True})


def test_garbage_response_is_remote_protocol_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async def main() -> None:
        async with raw_server(handler) as port, lean_client(KeepAliveTransport()) as client:
            with pytest.raises(httpx2.RemoteProtocolError, match="status line"):
                await client.get(f"http://127.0.0.1:{port}/")

    run(main())


def test_request_bytes_on_the_wire() -> None:
    received: list[tuple[bytes, bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await read_request(reader))
        writer.write(reply(b"{}"))
        await writer.drain()

    async def main() -> int:
        async with raw_server(handler) as port, lean_client(KeepAliveTransport()) as client:
            await client.post(f"http://127.0.0.1:{port}/v1/chat/completions?x=1", json={"a": "é"},
                              headers={"Authorization": "Bearer k"})
            return port

    port = run(main())
    [(head, body)] = received
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions?x=1 HTTP/1.1"
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines[1:] if line)}
    assert headers["host"] == f"127.0.0.1:{port}"
    assert headers["authorization"] == "Bearer k"
    assert headers["content-length"] == str(len(body))
    assert json.loads(body) == {"a": "é"}


def test_streamed_upload_is_sent_chunked() -> None:
    received: list[tuple[bytes, bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        body = b""
        while size := int(await reader.readuntil(b"\r\n"), 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readexactly(2)  # the CRLF after the last chunk
        received.append((head, body))
        writer.write(reply(b"{}"))
        await writer.drain()

    async def parts() -> AsyncIterator[bytes]:
        yield b'{"a": '
        yield b"1}"

    async def main() -> int:
        async with raw_server(handler) as port, lean_client(KeepAliveTransport()) as client:
            return (await client.post(f"http://127.0.0.1:{port}/", content=parts())).status_code

    assert run(main()) == 200
    [(head, body)] = received
    assert b"transfer-encoding: chunked" in head.lower() and body == b'{"a": 1}'


def test_aclose_closes_pooled_sockets() -> None:
    async def main() -> bool:
        peer_saw_eof = asyncio.Event()

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(reply(b"{}"))
            await writer.drain()
            if await reader.read(1) == b"":
                peer_saw_eof.set()

        async with raw_server(handler) as port:
            transport = KeepAliveTransport()
            client = lean_client(transport)
            await client.get(f"http://127.0.0.1:{port}/")
            assert not peer_saw_eof.is_set()  # pooled, open
            await client.aclose()
            await asyncio.wait_for(peer_saw_eof.wait(), 2.0)
            return peer_saw_eof.is_set()

    assert run(main())


# ---------------------------------------------------------------------------------------------
# When the lean transport is not used


def test_https_and_proxies_use_the_standard_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    assert uses_keepalive_transport("http://127.0.0.1:8000/v1")
    assert not uses_keepalive_transport("https://api.openai.com/v1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert uses_keepalive_transport("http://127.0.0.1:8000/v1")  # an https-only proxy does not apply
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    assert not uses_keepalive_transport("http://127.0.0.1:8000/v1")
    monkeypatch.delenv("http_proxy")
    monkeypatch.setenv("ALL_PROXY", "http://proxy.invalid:3128")
    assert not uses_keepalive_transport("http://127.0.0.1:8000/v1")


def test_https_base_url_speaks_tls() -> None:
    """make_async_client for https:// sends a TLS ClientHello (record type 0x16), not plain HTTP."""
    first_bytes: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first_bytes.append(await reader.read(5))

    async def main() -> None:
        async with raw_server(handler) as port:
            url = f"https://127.0.0.1:{port}/v1"
            async with make_async_client(url, timeout=httpx2.Timeout(2.0), max_connections=2) as client:
                with pytest.raises(httpx2.HTTPError):
                    await client.get(f"{url}/models")

    run(main())
    assert first_bytes and first_bytes[0][:1] == b"\x16"


def test_backend_on_an_https_url_speaks_tls() -> None:
    first_bytes: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first_bytes.append(await reader.read(5))

    async def main() -> str | None:
        async with raw_server(handler) as port:
            config = OpenAICompatConfig(base_url=f"https://127.0.0.1:{port}/v1", model=MODEL, max_retries=0, timeout_s=2.0)
            backend = OpenAICompatBackend(config)
            try:
                completion = await backend.complete(Prompt(params=GenerationParams(max_tokens=4), text="hi"))
            finally:
                await backend.aclose()
            return completion.error

    error = run(main())
    assert error is not None and error.startswith("connection error after 1 attempt")
    assert first_bytes and first_bytes[0][:1] == b"\x16"


def test_https_request_on_the_lean_transport_goes_to_the_fallback() -> None:
    """A redirect from http:// to https:// reaches the fallback transport."""
    fallback_saw: list[str] = []

    def fallback_handler(request: httpx2.Request) -> httpx2.Response:
        fallback_saw.append(str(request.url))
        return httpx2.Response(200, json={"via": "fallback"})

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply(b"", "Location: https://secure.invalid/v1/models", status="301 Moved Permanently"))
        await writer.drain()

    async def main() -> Any:
        transport = KeepAliveTransport(fallback=httpx2.MockTransport(fallback_handler))
        async with raw_server(handler) as port:
            async with httpx2.AsyncClient(transport=transport, follow_redirects=True) as client:
                return (await client.get(f"http://127.0.0.1:{port}/v1/models")).json()

    assert run(main()) == {"via": "fallback"}
    assert fallback_saw == ["https://secure.invalid/v1/models"]


def test_http_proxy_env_routes_through_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """With HTTP_PROXY set the SDK's standard client is used, so the proxy sees the request."""
    proxied: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        proxied.append(head.split(b"\r\n", 1)[0])
        writer.write(reply(b'{"via": "proxy"}', "Content-Type: application/json"))
        await writer.drain()

    async def main() -> Any:
        async with raw_server(proxy) as port:
            monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
            target = "http://10.255.255.1:9/v1"  # never reached directly
            async with make_async_client(target, timeout=httpx2.Timeout(2.0), max_connections=2) as client:
                return (await client.get(f"{target}/models")).json()

    assert run(main()) == {"via": "proxy"}
    assert proxied == [b"GET http://10.255.255.1:9/v1/models HTTP/1.1"]
