"""A real, loopback-only, OpenAI-compatible HTTP server for tests and benches.

Why a real server rather than mocking the SDK: the behaviours worth testing in a backend (retries,
timeouts, dropped connections, connection-pool limits, Retry-After handling) live in the HTTP and
socket layers, which a mock skips. This server speaks just enough HTTP/1.1 (keep-alive,
Content-Length bodies; chunked replies with the ``chunked`` fault) on
:func:`asyncio.start_server`, so it needs no dependency beyond the standard library, and it
never blocks a thread: latency is an ``asyncio.sleep``, so any number of requests can be in
flight at once.

Three ways to run it:

* **in a thread** (tests)::

      with FakeOpenAIServer(models=("m",), latency=0.0) as server:
          backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m"))
          server.plan_faults(["429:retry_after=1", "500"])
          ...
          assert server.total_requests == 3

* **as a subprocess** (benches, kill-and-resume tests; the server's CPU then does not compete
  for the client's GIL)::

      python -m tests.support.fake_openai --port 0 --latency 0.2 --script answers.json

  The first line on stdout is the base URL (``http://127.0.0.1:PORT/v1``). From Python use
  :class:`FakeOpenAIProcess`, which starts it, reads the URL and talks to the ``/_admin``
  endpoints (``stats``, ``faults``, ``reset``) so counters and fault plans work across processes.

* **in the caller's event loop**: ``await server.serve_async()`` / ``await server.close_async()``.

Answers come from a *responder*, ``responder(request_json) -> str | None``. The default,
:func:`echo_responder`, is deterministic in the prompt: for a prompt containing
``"Text to process:\\n<text>"`` it answers ``"<response><text></response>"`` (a perfect copy of
the text with no entities tagged). :class:`ScriptedResponder` maps substrings of the last user
message (or the completions prompt) to fixed answers.

Faults are planned per request, see :class:`Fault` for the spec syntax
(``"429:retry_after=1"``, ``"500"``, ``"slow:5"``, ``"malformed_json"``, ``"empty_content"``,
``"null_content"``, ``"drop"``, ``"drop_mid"``, ``"chunked"``, ``"400"``, ``"ok"``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.utils
import hashlib
import itertools
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_MODELS",
    "TEXT_MARKER",
    "FakeOpenAIProcess",
    "FakeOpenAIServer",
    "FakeRequest",
    "Fault",
    "ScriptedResponder",
    "echo_responder",
    "prompt_key",
    "request_text",
]

DEFAULT_MODELS: tuple[str, ...] = ("fake-model",)
#: the line that introduces the input text in evalpipe's extraction templates
TEXT_MARKER = "Text to process:\n"
LOOPBACK = "127.0.0.1"

Responder = Callable[[Mapping[str, Any]], "str | None"]
JSONDict = dict[str, Any]

_GENERATION_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
_MAX_HEADER_BYTES = 64 * 1024


# --------------------------------------------------------------------------------------------
# Answers


def request_text(body: Mapping[str, Any]) -> str:
    """The text a responder keys on: the last user message (chat) or the prompt (completions).

    Content given as a list of parts (``[{"type": "text", "text": ...}]``) is joined, so
    multimodal-style requests still produce something deterministic.
    """
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                return _content_text(message.get("content"))
        return _content_text(messages[-1].get("content")) if messages else ""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = prompt[0] if prompt else ""
    return prompt if isinstance(prompt, str) else ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def echo_responder(body: Mapping[str, Any]) -> str:
    """Answer with a perfect copy of the input text and no entities: ``<response>TEXT</response>``.

    TEXT is what follows the *last* ``"Text to process:\\n"`` (few-shot prompts repeat the marker
    for their examples) up to the next blank line; without the marker it is the last non-empty
    line of the prompt. Deterministic in the prompt, so a resumed run gets the same answers.
    """
    text = request_text(body)
    at = text.rfind(TEXT_MARKER)
    if at >= 0:
        segment = text[at + len(TEXT_MARKER) :].split("\n\n", 1)[0].strip()
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        segment = lines[-1].strip() if lines else ""
    return f"<response>{segment}</response>"


class ScriptedResponder:
    """Fixed answers keyed by substring; the first key (in insertion order) found in the prompt wins.

    The prompt is :func:`request_text` (last user message or completions prompt). Requests that
    match no key go to ``fallback`` (the echo responder unless given).
    """

    def __init__(self, answers: Mapping[str, str | None], fallback: Responder = echo_responder) -> None:
        self.answers = dict(answers)
        self.fallback = fallback

    def __call__(self, body: Mapping[str, Any]) -> str | None:
        text = request_text(body)
        for needle, answer in self.answers.items():
            if needle in text:
                return answer
        return self.fallback(body)


def prompt_key(body: Mapping[str, Any]) -> str:
    """A short stable hash of what was asked (messages or prompt), for per-prompt request counts."""
    payload = body.get("messages") if "messages" in body else body.get("prompt")
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Faults


_NO_ARG_KINDS = {"ok", "malformed_json", "empty_content", "null_content", "drop", "drop_mid", "chunked"}
#: bytes per chunk of a ``chunked`` fault's body (small, so a reply spans several chunks)
_CHUNK_BYTES = 64


@dataclass(frozen=True)
class Fault:
    """What to do wrong with one generation request.

    Spec syntax (``Fault.parse``), ``KIND[:ARG]`` where ARG is a number or ``key=value`` pairs
    joined by ``,``:

    ==================================  ==========================================================
    ``"ok"``                            no fault (a placeholder in a plan)
    ``"429"``, ``"500"``, ``"400"`` …   that HTTP status with an OpenAI-style error JSON body
    ``"429:retry_after=1.5"``           … plus ``Retry-After: 1.5``
    ``"429:retry_after_date=2"``        … plus ``Retry-After`` as an HTTP-date 2 s from now
    ``"slow:5"``                        wait 5 s more than ``latency``, then answer normally
    ``"malformed_json"``                200 with a truncated JSON body
    ``"empty_content"``                 200 with ``content: ""``
    ``"null_content"``                  200 with ``content: null``
    ``"drop"``                          close the connection without sending anything
    ``"drop_mid"``                      send the headers and half the body, then close
    ``"chunked"``                       a normal answer, sent with ``Transfer-Encoding: chunked``
    ==================================  ==========================================================
    """

    kind: str
    status: int | None = None
    retry_after_s: float | None = None
    retry_after_as_date: bool = False
    delay_s: float = 0.0
    #: error message for status faults (programmatic use only; not in the spec syntax)
    message: str | None = None

    @classmethod
    def parse(cls, spec: str | Fault) -> Fault:
        """Parse a spec string (see the class docstring); a Fault passes through unchanged."""
        if isinstance(spec, Fault):
            return spec
        kind, _, arg = spec.strip().partition(":")
        kind = kind.strip().lower()
        if kind.isdigit() and len(kind) == 3:
            return cls._parse_status(int(kind), arg, spec)
        if kind == "slow":
            try:
                return cls(kind="slow", delay_s=float(arg))
            except ValueError:
                raise ValueError(f"fault {spec!r}: slow needs seconds, e.g. 'slow:5'") from None
        if kind in _NO_ARG_KINDS and not arg:
            return cls(kind=kind)
        raise ValueError(f"unknown fault spec {spec!r}; see tests.support.fake_openai.Fault")

    @classmethod
    def _parse_status(cls, status: int, arg: str, spec: str) -> Fault:
        if not 400 <= status <= 599:
            raise ValueError(f"fault {spec!r}: status faults must be 4xx or 5xx")
        options = dict(item.split("=", 1) for item in arg.split(",") if item) if arg else {}
        unknown = set(options) - {"retry_after", "retry_after_date"}
        if unknown:
            raise ValueError(f"fault {spec!r}: unknown option(s) {sorted(unknown)}")
        if "retry_after_date" in options:
            return cls("status", status, float(options["retry_after_date"]), retry_after_as_date=True)
        retry_after = float(options["retry_after"]) if "retry_after" in options else None
        return cls("status", status, retry_after)

    @property
    def label(self) -> str:
        """Short name used in the ``faults_injected`` counter."""
        return str(self.status) if self.kind == "status" else self.kind


@dataclass(frozen=True)
class FakeRequest:
    """One received request, as recorded for assertions and passed to fault policies."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    endpoint: str | None  # "chat", "completions", or None for other paths


FaultPolicy = Callable[[FakeRequest], "Fault | str | None"]


@dataclass
class _Reply:
    """What the connection handler should send back."""

    status: int = 200
    payload: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    drop: str | None = None  # None, "before" (nothing sent) or "mid" (half a response)
    chunked: bool = False  # send the payload with Transfer-Encoding: chunked


def _json_reply(status: int, obj: Any, headers: list[tuple[str, str]] | None = None) -> _Reply:
    payload = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return _Reply(status, payload, [("Content-Type", "application/json"), *(headers or [])])


def _error_reply(status: int, message: str, type_: str, code: str | None = None, **extra: Any) -> _Reply:
    body = {"error": {"message": message, "type": type_, "param": extra.pop("param", None), "code": code}}
    return _json_reply(status, body, extra.pop("headers", None))


def _estimate_tokens(text: str) -> int:
    """Rough token count (4 characters a token) so usage fields look like a real server's."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def fake_token_count(body: Mapping[str, Any]) -> int:
    """The fake ``/tokenize``: one token per whitespace-separated word, so tests can count by hand.

    A chat request is counted through a fake template, ``<|role|> content`` per message plus
    ``<|assistant|>`` for the generation prompt: each message costs its words plus one, and the
    generation prompt one more.
    """
    if "messages" in body:
        messages = body["messages"]
        total = sum(1 + len(_content_text(m.get("content")).split()) for m in messages)
        return total + (1 if body.get("add_generation_prompt", True) else 0)
    return len(str(body["prompt"]).split())


def _apply_stop(text: str, stop: Any) -> str:
    """Cut the answer at the earliest stop sequence, as real servers do."""
    stops = [stop] if isinstance(stop, str) else [s for s in (stop or []) if isinstance(s, str) and s]
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return text[:cut] if cut >= 0 else text


# --------------------------------------------------------------------------------------------
# The server


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 with fault injection and request counters.

    ``models``: ids listed by ``GET /v1/models`` and accepted in requests (others get 404).
    ``responder``: ``body -> str | None`` (None is sent as ``content: null``).
    ``latency``: seconds every generation request waits before its reply (``asyncio.sleep``).
    ``api_key``: when set, ``/v1/*`` requires ``Authorization: Bearer <api_key>`` (401 otherwise).
    ``record``: keep every generation request (:attr:`requests`); benches turn it off.
    ``max_model_len``: reported per model by ``GET /v1/models``, as vLLM does.
    ``tokenize``: answer vLLM's ``POST /tokenize`` (see :func:`fake_token_count`); with
    ``chat_template=False`` a chat-form request is refused (400), as for a model without a template.

    All public methods are safe to call from any thread while the server runs in its own.
    """

    def __init__(
        self,
        *,
        models: Sequence[str] = DEFAULT_MODELS,
        responder: Responder | None = None,
        latency: float = 0.0,
        api_key: str | None = None,
        record: bool = True,
        port: int = 0,
        max_model_len: int | None = None,
        tokenize: bool = False,
        chat_template: bool = True,
    ) -> None:
        self.models = tuple(models)
        self.max_model_len = max_model_len
        self.tokenize = tokenize
        self.chat_template = chat_template
        self.responder: Responder = responder or echo_responder
        self.latency = latency
        self.record = record
        self._api_key = api_key
        self._requested_port = port
        self._lock = threading.Lock()
        self._faults: deque[Fault] = deque()
        self._policy: FaultPolicy | None = None
        self._ids = itertools.count(1)
        self._in_flight = 0
        self._reset_counters_locked()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    # -- configuration ------------------------------------------------------------------------

    def plan_faults(self, specs: Iterable[str | Fault], count: int = 1) -> None:
        """Queue faults for the next generation requests, each spec ``count`` times, in order.

        ``plan_faults(["429:retry_after=1", "500"])`` makes the next request a 429 and the one
        after it a 500; ``plan_faults(["500"], count=7)`` fails the next seven.
        """
        faults = [Fault.parse(spec) for spec in specs for _ in range(count)]
        with self._lock:
            self._faults.extend(faults)

    def set_fault_policy(self, policy: FaultPolicy | None) -> None:
        """Decide faults per request with a callable, consulted when the planned queue is empty.

        ``policy(request) -> Fault | spec | None``; it runs on the server's event loop, so it
        must be quick and must not block.
        """
        with self._lock:
            self._policy = policy

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._policy = None

    def reset_counters(self) -> None:
        """Zero the counters and forget recorded requests (faults stay planned; requests still in
        flight stay counted in ``in_flight``)."""
        with self._lock:
            self._reset_counters_locked()

    def _reset_counters_locked(self) -> None:
        self._total = 0
        self._models_requests = 0
        self._tokenize_requests = 0
        self._per_prompt: Counter[str] = Counter()
        self._faults_injected: Counter[str] = Counter()
        self._max_in_flight = self._in_flight
        self._requests: list[FakeRequest] = []
        self._connections = 0

    # -- counters -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL including ``/v1``, as OpenAI clients expect it."""
        if self.port is None:
            raise RuntimeError("the fake server is not running")
        return f"http://{LOOPBACK}:{self.port}/v1"

    @property
    def total_requests(self) -> int:
        """Generation requests received (chat + completions), faulted ones included."""
        return self._total

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def connections(self) -> int:
        """TCP connections accepted (a client that reuses keep-alive connections opens few)."""
        return self._connections

    @property
    def max_in_flight(self) -> int:
        """The most generation requests that were being handled at the same moment."""
        return self._max_in_flight

    @property
    def requests(self) -> list[FakeRequest]:
        """Recorded generation requests, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def last_body(self) -> Any:
        with self._lock:
            return self._requests[-1].body if self._requests else None

    def per_prompt(self) -> dict[str, int]:
        """Requests per :func:`prompt_key` (a copy)."""
        with self._lock:
            return dict(self._per_prompt)

    def count_for(self, body_or_text: Mapping[str, Any] | str) -> int:
        """Requests for one prompt: a request body (hashed with :func:`prompt_key`) or a substring
        of the prompt text (needs ``record=True``)."""
        if isinstance(body_or_text, Mapping):
            return self.per_prompt().get(prompt_key(body_or_text), 0)
        return sum(body_or_text in request_text(r.body) for r in self.requests if isinstance(r.body, Mapping))

    def stats(self) -> JSONDict:
        """All counters as plain JSON (what ``GET /_admin/stats`` returns)."""
        with self._lock:
            per_prompt = dict(self._per_prompt)
            return {
                "total_requests": self._total,
                "models_requests": self._models_requests,
                "tokenize_requests": self._tokenize_requests,
                "distinct_prompts": len(per_prompt),
                "max_requests_per_prompt": max(per_prompt.values(), default=0),
                "per_prompt": per_prompt,
                "faults_injected": dict(self._faults_injected),
                "faults_pending": len(self._faults),
                "in_flight": self._in_flight,
                "max_in_flight": self._max_in_flight,
                "connections": self._connections,
            }

    # -- lifecycle ----------------------------------------------------------------------------

    async def serve_async(self) -> None:
        """Start listening in the running event loop (returns once the port is bound)."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(
            self._on_connection, LOOPBACK, self._requested_port, limit=_MAX_HEADER_BYTES, backlog=4096
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close_async(self) -> None:
        """Stop listening and cut every open connection (slow replies included)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def start(self, timeout: float = 10.0) -> FakeOpenAIServer:
        """Run the server on its own event loop in a daemon thread; returns once it listens."""
        if self._thread is not None:
            raise RuntimeError("the fake server is already running")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._thread_main, args=(ready, failure), name="fake-openai", daemon=True
        )
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError("the fake server did not start in time")
        if failure:
            raise RuntimeError("the fake server failed to start") from failure[0]
        return self

    def _thread_main(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self.serve_async())
        except BaseException as exc:  # reported to start()
            failure.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self.close_async())
            loop.close()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop a server started with :meth:`start` and join its thread."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        self._thread = None
        self.port = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- HTTP ---------------------------------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one keep-alive connection: read a request, reply, repeat until the peer closes."""
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        with self._lock:
            self._connections += 1
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the client went away or sent garbage: nothing useful to answer
        except asyncio.CancelledError:
            pass  # shutdown; ending normally keeps 3.11's stream callback from logging it
        finally:
            self._handlers.discard(task)
            writer.transport.abort()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Handle one request; False when the connection should close."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False  # clean close between requests
        request_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            await self._write(writer, _error_reply(411, "chunked bodies are not supported", "invalid_request_error"))
            return False
        length = int(headers.get("content-length", "0") or 0)
        raw = await reader.readexactly(length) if length else b""
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        reply = await self._dispatch(method, target.split("?", 1)[0], headers, raw)
        if reply.drop == "before":
            return False
        if reply.drop == "mid":
            await self._write(writer, reply, truncate=True)
            return False
        await self._write(writer, reply, keep_alive=keep_alive)
        return keep_alive

    @staticmethod
    async def _write(
        writer: asyncio.StreamWriter, reply: _Reply, *, keep_alive: bool = True, truncate: bool = False
    ) -> None:
        phrase = HTTPStatus(reply.status).phrase if reply.status in HTTPStatus._value2member_map_ else "Unknown"
        framing = "Transfer-Encoding: chunked" if reply.chunked else f"Content-Length: {len(reply.payload)}"
        lines = [f"HTTP/1.1 {reply.status} {phrase}", framing]
        lines += [f"{k}: {v}" for k, v in reply.headers]
        lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
        payload = reply.payload[: len(reply.payload) // 2] if truncate else reply.payload
        if reply.chunked:
            pieces = [payload[i : i + _CHUNK_BYTES] for i in range(0, len(payload), _CHUNK_BYTES)]
            payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
        await writer.drain()

    async def _dispatch(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> _Reply:
        if path.startswith("/_admin/"):
            return self._admin(method, path, raw)
        if path == "/health" and method == "GET":  # vLLM's liveness route (no key needed)
            return _Reply(200, b"")
        if self._api_key is not None and headers.get("authorization") != f"Bearer {self._api_key}":
            return _error_reply(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        if path == "/v1/models" and method == "GET":
            with self._lock:
                self._models_requests += 1
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake-openai"} for m in self.models]
            if self.max_model_len is not None:
                data = [{**entry, "max_model_len": self.max_model_len} for entry in data]
            return _json_reply(200, {"object": "list", "data": data})
        if path == "/tokenize" and method == "POST" and self.tokenize:
            return self._tokenize(raw)
        endpoint = _GENERATION_PATHS.get(path)
        if endpoint is None or method != "POST":
            return _error_reply(404, f"no route for {method} {path}", "invalid_request_error", "not_found")
        return await self._generate(endpoint, path, headers, raw)

    def _tokenize(self, raw: bytes) -> _Reply:
        with self._lock:
            self._tokenize_requests += 1
        try:
            body = json.loads(raw)
        except ValueError:
            return _error_reply(400, "invalid JSON", "invalid_request_error")
        if not isinstance(body, dict) or not ("prompt" in body or "messages" in body):
            return _error_reply(400, "prompt or messages required", "invalid_request_error")
        if "messages" in body and not self.chat_template:
            return _error_reply(400, "this model has no chat template", "invalid_request_error")
        count = fake_token_count(body)
        return _json_reply(200, {"count": count, "max_model_len": self.max_model_len or 0,
                                 "tokens": list(range(count))})

    async def _generate(self, endpoint: str, path: str, headers: Mapping[str, str], raw: bytes) -> _Reply:
        try:
            body = json.loads(raw)
        except ValueError:
            return _error_reply(400, "request body is not valid JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return _error_reply(400, "request body must be a JSON object", "invalid_request_error")
        request = FakeRequest("POST", path, dict(headers), body, endpoint)
        fault = self._admit(request)
        try:
            delay = self.latency + (fault.delay_s if fault else 0.0)
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                return self._answer(endpoint, body, fault)
            except Exception as exc:  # a broken test responder: say so instead of dropping
                traceback.print_exc(file=sys.stderr)
                return _error_reply(500, f"fake server error: {exc!r}", "server_error")
        finally:
            with self._lock:
                self._in_flight -= 1

    def _admit(self, request: FakeRequest) -> Fault | None:
        """Count the request and pick its fault (planned queue first, then the policy)."""
        with self._lock:
            self._total += 1
            self._per_prompt[prompt_key(request.body)] += 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            if self.record:
                self._requests.append(request)
            fault = self._faults.popleft() if self._faults else None
            policy = self._policy
        if fault is None and policy is not None:
            decided = policy(request)
            fault = Fault.parse(decided) if decided is not None else None
        if fault is not None and fault.kind == "ok":
            fault = None
        if fault is not None:
            with self._lock:
                self._faults_injected[fault.label] += 1
        return fault

    def _answer(self, endpoint: str, body: JSONDict, fault: Fault | None) -> _Reply:
        if fault is not None and fault.kind == "status":
            return self._status_fault(fault)
        if fault is not None and fault.kind == "drop":
            return _Reply(drop="before")
        model = body.get("model")
        if model not in self.models:
            return _error_reply(
                404, f"The model `{model}` does not exist.", "invalid_request_error", "model_not_found", param="model"
            )
        if endpoint == "chat" and not (isinstance(body.get("messages"), list) and body["messages"]):
            return _error_reply(400, "'messages' must be a non-empty list", "invalid_request_error", param="messages")
        if endpoint == "completions" and not isinstance(body.get("prompt"), (str, list)):
            return _error_reply(400, "'prompt' is required", "invalid_request_error", param="prompt")
        if fault is not None and fault.kind in ("empty_content", "null_content"):
            text: str | None = "" if fault.kind == "empty_content" else None
        else:
            text = self.responder(body)
            text = _apply_stop(text, body.get("stop")) if text is not None else None
        reply = _json_reply(200, self._completion_json(endpoint, body, text))
        if fault is not None and fault.kind == "malformed_json":
            reply.payload = reply.payload[: max(1, len(reply.payload) // 2)]
        if fault is not None and fault.kind == "drop_mid":
            reply.drop = "mid"
        if fault is not None and fault.kind == "chunked":
            reply.chunked = True
        return reply

    def _completion_json(self, endpoint: str, body: JSONDict, text: str | None) -> JSONDict:
        n = next(self._ids)
        prompt_tokens = _estimate_tokens(json.dumps(body.get("messages") or body.get("prompt") or ""))
        completion_tokens = _estimate_tokens(text or "")
        if endpoint == "chat":
            choice: JSONDict = {"index": 0, "message": {"role": "assistant", "content": text}}
            head = {"id": f"chatcmpl-fake-{n}", "object": "chat.completion"}
        else:
            choice = {"index": 0, "text": text if text is not None else "", "logprobs": None}
            head = {"id": f"cmpl-fake-{n}", "object": "text_completion"}
        choice["finish_reason"] = "stop"
        return {
            **head,
            "created": int(time.time()),
            "model": body["model"],
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    @staticmethod
    def _status_fault(fault: Fault) -> _Reply:
        assert fault.status is not None
        headers: list[tuple[str, str]] = []
        if fault.retry_after_s is not None:
            if fault.retry_after_as_date:
                value = email.utils.formatdate(time.time() + fault.retry_after_s, usegmt=True)
            else:
                value = f"{fault.retry_after_s:g}"
            headers.append(("Retry-After", value))
        type_ = "rate_limit_error" if fault.status == 429 else (
            "server_error" if fault.status >= 500 else "invalid_request_error"
        )
        message = fault.message or f"injected fault: HTTP {fault.status}"
        return _error_reply(fault.status, message, type_, str(fault.status), headers=headers)

    def _admin(self, method: str, path: str, raw: bytes) -> _Reply:
        """Control endpoints for a server in another process (see :class:`FakeOpenAIProcess`)."""
        if path == "/_admin/stats" and method == "GET":
            return _json_reply(200, self.stats())
        if path == "/_admin/requests" and method == "GET":
            return _json_reply(200, [r.body for r in self.requests])
        if path == "/_admin/faults" and method == "POST":
            try:
                spec = json.loads(raw or b"{}")
                self.plan_faults(spec.get("faults", []), int(spec.get("count", 1)))
            except (ValueError, TypeError, AttributeError) as exc:
                return _error_reply(400, str(exc), "invalid_request_error")
            return _json_reply(200, {"faults_pending": len(self._faults)})
        if path == "/_admin/reset" and method == "POST":
            self.clear_faults()
            self.reset_counters()
            return _json_reply(200, {"reset": True})
        return _error_reply(404, f"no admin route {method} {path}", "invalid_request_error")


# --------------------------------------------------------------------------------------------
# Subprocess mode


_REPO_ROOT = Path(__file__).resolve().parents[2]


class FakeOpenAIProcess:
    """The fake server in a child process (``python -m tests.support.fake_openai``).

    Use it where the server must not share the client's process: throughput benches (the
    server's CPU would steal the client's GIL) and tests that kill the client mid-run. Counters
    and fault plans go through the ``/_admin`` endpoints.
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        models: Sequence[str] = DEFAULT_MODELS,
        script: str | os.PathLike[str] | None = None,
        faults: Sequence[str] = (),
        record: bool = False,
        api_key_env: str | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 20.0,
    ) -> None:
        args = [sys.executable, "-m", "tests.support.fake_openai", "--port", "0", "--latency", str(latency)]
        for model in models:
            args += ["--model", model]
        if script is not None:
            args += ["--script", os.fspath(script)]
        for spec in faults:
            args += ["--fault", spec]
        if record:
            args.append("--record")
        if api_key_env is not None:
            args += ["--api-key-env", api_key_env]
        self.args = [*args, *extra_args]
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> FakeOpenAIProcess:
        """Launch the child and wait for the URL it prints on its first stdout line."""
        python_path = os.pathsep.join(filter(None, [str(_REPO_ROOT), os.environ.get("PYTHONPATH")]))
        env = dict(os.environ, PYTHONPATH=python_path)
        self.proc = subprocess.Popen(self.args, cwd=_REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], self.startup_timeout)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("http://"):
            self.stop()
            raise RuntimeError(f"fake OpenAI server did not start (first line: {line!r})")
        self.url = line
        return self

    def stop(self) -> None:
        """Terminate the child (SIGTERM, then SIGKILL after 5 s)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def _admin(self, path: str, payload: Any = None) -> Any:
        root = self.url.removesuffix("/v1")
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(root + path, data=data, method="GET" if data is None else "POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def stats(self) -> JSONDict:
        return self._admin("/_admin/stats")

    def recorded_bodies(self) -> list[Any]:
        """Bodies of recorded generation requests (start with ``record=True``)."""
        return self._admin("/_admin/requests")

    def plan_faults(self, specs: Iterable[str], count: int = 1) -> None:
        self._admin("/_admin/faults", {"faults": list(specs), "count": count})

    def reset(self) -> None:
        self._admin("/_admin/reset", {})

    def __enter__(self) -> FakeOpenAIProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------
# Command line


def load_script(path: str | os.PathLike[str]) -> tuple[dict[str, str | None], list[str]]:
    """Read a script file: ``{"substring": "answer", ...}`` or
    ``{"answers": {...}, "faults": ["500", ...]}``. Returns (answers, fault specs)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a script is a JSON object")
    if isinstance(data.get("answers"), dict) and set(data) <= {"answers", "faults"}:
        return dict(data["answers"]), [str(f) for f in data.get("faults", [])]
    return dict(data), []


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.fake_openai",
        description="Loopback OpenAI-compatible server for tests; prints its base URL on stdout's first line.",
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each generation request waits")
    parser.add_argument("--model", action="append", dest="models", help="served model id (repeatable)")
    parser.add_argument("--script", help="JSON file of substring -> answer (see load_script)")
    parser.add_argument("--fault", action="append", default=[], help="fault spec to plan, in order (repeatable)")
    parser.add_argument("--record", action="store_true", help="keep request bodies (GET /_admin/requests)")
    parser.add_argument("--api-key-env", help="require Bearer <value of this env var> on /v1/*")
    return parser.parse_args(argv)


async def _serve_until_signalled(server: FakeOpenAIServer) -> None:
    """Serve until SIGTERM/SIGINT, or until the parent process dies (so a crashed test run
    leaves no server behind)."""
    await server.serve_async()
    print(server.url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watchdog = asyncio.ensure_future(_watch_parent(stop))
    await stop.wait()
    watchdog.cancel()
    await server.close_async()


async def _watch_parent(stop: asyncio.Event, interval_s: float = 1.0) -> None:
    parent = os.getppid()
    while not stop.is_set():
        await asyncio.sleep(interval_s)
        if os.getppid() != parent:  # re-parented: whoever started us is gone
            stop.set()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    responder: Responder = echo_responder
    faults: list[str] = []
    if args.script:
        answers, faults = load_script(args.script)
        responder = ScriptedResponder(answers)
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            print(f"environment variable {args.api_key_env} is not set", file=sys.stderr)
            return 2
    server = FakeOpenAIServer(
        models=args.models or DEFAULT_MODELS,
        responder=responder,
        latency=args.latency,
        api_key=api_key,
        record=args.record,
        port=args.port,
    )
    server.plan_faults([*faults, *args.fault])
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_until_signalled(server))
    return 0


if __name__ == "__main__":
    sys.exit(main())
