"""A loopback HTTP server that answers whatever a test scripts — redirects, huge bodies, odd usage —
and records every request; plus a guard that fails a test on any connection off loopback.

Why not :class:`tests.support.fake_openai.FakeOpenAIServer`: that server models an honest endpoint
with planned faults; these tests need replies no honest endpoint sends (a 307 to another host, a
body of 64 MB, ``Infinity`` tokens), written raw.
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def chat_reply(content: str, usage: Any = None) -> dict[str, Any]:
    """An OpenAI chat completion body (``usage`` given raw, so it may be impossible)."""
    body: dict[str, Any] = {"id": "x", "object": "chat.completion",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                         "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = usage
    return body


class HostileServer:
    """``routes``: path → handler; ``GET /v1/models`` lists ``models`` unless a route replaces it."""

    def __init__(self, routes: dict[str, Handler], models: tuple[str, ...] = ("m",),
                 max_model_len: int | None = None) -> None:
        self.routes = routes
        self.models, self.max_model_len = models, max_model_len
        self.requests: list[tuple[str, str]] = []
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        handler = self.routes.get(request.path)
        if handler is not None:
            return await handler(request)
        if request.path == "/v1/models":
            entry: dict[str, Any] = {"object": "model"}
            if self.max_model_len is not None:
                entry["max_model_len"] = self.max_model_len
            return web.json_response({"object": "list", "data": [{"id": m, **entry} for m in self.models]})
        return web.json_response({"error": {"message": f"no route {request.path}"}}, status=404)

    def __enter__(self) -> HostileServer:
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application(client_max_size=1024**3)
            app.router.add_route("*", "/{tail:.*}", self._dispatch)
            runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        assert ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def connections_recorded(monkeypatch) -> list[str]:
    """Every host evalpipe's HTTP client opens a TCP connection to (a proxy's host when it goes through
    one); a connection to anything but loopback fails the test before a packet is sent."""
    hosts: list[str] = []
    original = aiohttp.TCPConnector._create_direct_connection

    async def recorded(self, req, *args, **kwargs):  # type: ignore[no-untyped-def]
        host = req.host
        hosts.append(host)
        if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
            raise AssertionError(f"a connection to {host} was attempted: nothing may leave loopback")
        return await original(self, req, *args, **kwargs)

    monkeypatch.setattr(aiohttp.TCPConnector, "_create_direct_connection", recorded)
    return hosts
