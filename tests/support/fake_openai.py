"""A real, loopback-only, OpenAI-compatible HTTP server for tests and benches, on ``aiohttp.web``.

Why a real server rather than mocking a client: the behaviours worth testing in a backend (retries,
timeouts, dropped connections, connection reuse, Retry-After handling, what an error body carries)
live in the HTTP and socket layers, which a mock skips. The HTTP protocol is aiohttp's; this module
only decides *what* to answer. Latency is an ``asyncio.sleep``, so any number of requests can be in
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
  endpoints (``stats``, ``faults``, ``reset``, ``timeline``) so counters, fault plans and the
  request timeline work across processes.

* **in the caller's event loop**: ``await server.serve_async()`` / ``await server.close_async()``.

Routes: ``GET /v1/models`` (with ``max_model_len`` per model when given, as vLLM does),
``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/embeddings``, ``GET /health``,
and with ``tokenize=`` vLLM's ``POST /tokenize`` or llama.cpp's ``POST /extras/tokenize/count``.

Answers come from a *responder*, ``responder(request_json) -> str | None``. The default,
:func:`echo_responder`, is deterministic in the prompt: for a prompt containing
``"Text to process:\\n<text>"`` it answers ``"<response><text></response>"`` (a perfect copy of
the text with no entities tagged). :class:`ScriptedResponder` maps substrings of the last user
message (or the completions prompt) to fixed answers.

**Prompt log-probabilities** (log-likelihood scoring): a ``/v1/completions`` request with ``echo`` and
``logprobs`` gets, for each prompt of its ``prompt`` list, the echoed prompt's tokens (the text split
before each run of whitespace), their ``text_offset`` and ``token_logprobs``, plus one generated token,
as vLLM answers. Every token costs -1.0, except the last one of the prompt (the continuation being
scored), which costs -0.1 when it is what the responder answers for the text before it and -3.0
otherwise — so a script file drives log-likelihood runs as it drives generated answers. With
``logprobs=False`` (``--no-logprobs``) the server ignores ``echo``/``logprobs`` like an endpoint that
cannot return prompt log-probabilities.

Faults are planned per request (generation and embeddings requests), see :class:`Fault` for the
spec syntax (``"429:retry_after=1"``, ``"500"``, ``"slow:5"``, ``"malformed_json"``,
``"empty_content"``, ``"null_content"``, ``"drop"``, ``"drop_mid"``, ``"chunked"``, ``"400"``,
``"ok"``, and the hostile ones ``"lone_surrogate"``, ``"echo_auth"``, ``"wrong_shape"``).
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
import re
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

__all__ = [
    "DEFAULT_MODELS",
    "LONE_SURROGATE",
    "TEXT_MARKER",
    "FakeOpenAIProcess",
    "FakeOpenAIServer",
    "FakeRequest",
    "Fault",
    "ScriptedResponder",
    "echo_responder",
    "fake_token_count",
    "fake_vector",
    "prompt_key",
    "request_text",
]

DEFAULT_MODELS: tuple[str, ...] = ("fake-model",)
#: the line that introduces the input text in evalpipe's extraction templates
TEXT_MARKER = "Text to process:\n"
LOOPBACK = "127.0.0.1"
#: what the ``lone_surrogate`` fault answers: valid JSON (``"\\udcff"``), but no valid UTF-8 text
LONE_SURROGATE = "<response>broken \udcff answer</response>"

Responder = Callable[[Mapping[str, Any]], "str | None"]
JSONDict = dict[str, Any]

_ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/embeddings": "embeddings"}
#: request bodies up to this size (LongHealth prompts run to hundreds of kB)
_MAX_BODY_BYTES = 64 * 1024 * 1024
#: bytes per chunk of a ``chunked`` fault's body (small, so a reply spans several chunks)
_CHUNK_BYTES = 64
_EMBEDDING_DIMS = 8


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
    """A short stable hash of what was asked (messages, prompt or input), for per-prompt counts."""
    for field in ("messages", "prompt", "input"):
        if field in body:
            payload = body[field]
            break
    else:
        payload = None
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def fake_vector(text: str) -> list[float]:
    """The fake embedding: character counts in 8 buckets (``ord(ch) % 8``), so tests can compute it."""
    vector = [0.0] * _EMBEDDING_DIMS
    for ch in text:
        vector[ord(ch) % _EMBEDDING_DIMS] += 1.0
    return vector


def fake_token_count(body: Mapping[str, Any]) -> int:
    """The fake tokenizer: one token per whitespace-separated word, so tests can count by hand.

    A chat request is counted through a fake template, ``<|role|> content`` per message plus
    ``<|assistant|>`` for the generation prompt: each message costs its words plus one, and the
    generation prompt one more. llama.cpp's form sends ``{"input": text}``.
    """
    if "messages" in body:
        messages = body["messages"]
        total = sum(1 + len(_content_text(m.get("content")).split()) for m in messages)
        return total + (1 if body.get("add_generation_prompt", True) else 0)
    return len(str(body["prompt"] if "prompt" in body else body["input"]).split())


def _utf8_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _estimate_tokens(text: str) -> int:
    """Rough token count (4 characters a token) so usage fields look like a real server's."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def _apply_stop(text: str, stop: Any) -> str:
    """Cut the answer at the earliest stop sequence, as real servers do."""
    stops = [stop] if isinstance(stop, str) else [s for s in (stop or []) if isinstance(s, str) and s]
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return text[:cut] if cut >= 0 else text


# --------------------------------------------------------------------------------------------
# Faults


_NO_ARG_KINDS = {
    "ok", "malformed_json", "empty_content", "null_content", "drop", "drop_mid", "chunked",
    "lone_surrogate", "echo_auth", "wrong_shape",
}


@dataclass(frozen=True)
class Fault:
    """What to do wrong with one generation (or embeddings) request.

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
    ``"drop_mid"``                      send the headers and part of the body, then close
    ``"chunked"``                       a normal answer, sent with ``Transfer-Encoding: chunked``
    ``"lone_surrogate"``                200 whose content is :data:`LONE_SURROGATE` (valid JSON
                                        ``"\\udcff"``, not encodable as UTF-8)
    ``"echo_auth"``                     401 whose error message quotes the request's
                                        ``Authorization`` header (a careless server)
    ``"wrong_shape"``                   200 with valid JSON that is no completion (``choices: []``)
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
            return cls(kind=kind, status=401 if kind == "echo_auth" else None)
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
    endpoint: str | None  # "chat", "completions", "embeddings", or None for other paths


FaultPolicy = Callable[[FakeRequest], "Fault | str | None"]


def _json_response(status: int, obj: Any, headers: Mapping[str, str] | None = None, *,
                   ascii_only: bool = False) -> web.Response:
    text = json.dumps(obj, ensure_ascii=ascii_only, separators=(",", ":"))
    return web.Response(status=status, body=text.encode("utf-8"), content_type="application/json",
                        headers=headers)


def _error_response(status: int, message: str, type_: str, code: str | None = None, *,
                    param: str | None = None, headers: Mapping[str, str] | None = None) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    # ASCII escapes: an echoed header or message may carry anything
    return _json_response(status, body, headers, ascii_only=True)


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
    ``model_root``: the ``root`` of each ``/v1/models`` entry (vLLM: the checkpoint's path; with it,
    ``created`` is the time of the call, as vLLM sends it). ``system_fingerprint``: in every completion.
    ``tokenize``: answer a tokenizer endpoint (see :func:`fake_token_count`): ``True`` or
    ``"vllm"`` for vLLM's ``POST /tokenize`` (with ``chat_template=False`` a chat-form request is
    refused, 400, as for a model without a template), ``"llamacpp"`` for llama.cpp's
    ``POST /extras/tokenize/count``.

    Every generation request's arrival and reply times (``time.monotonic``, which is the same
    clock in every process on Linux) are kept in :meth:`timeline`, so a bench can see how quickly
    a client refills a finished request's slot.

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
        tokenize: bool | str = False,
        chat_template: bool = True,
        logprobs: bool = True,
        model_root: str | None = None,
        system_fingerprint: str | None = None,
    ) -> None:
        if tokenize not in (False, True, "vllm", "llamacpp"):
            raise ValueError(f"tokenize must be False, True, 'vllm' or 'llamacpp' (got {tokenize!r})")
        self.models = tuple(models)
        self.max_model_len = max_model_len
        self.tokenize: str | None = "vllm" if tokenize is True else (tokenize or None)
        self.chat_template = chat_template
        self.logprobs = logprobs
        #: ``root`` of every ``/v1/models`` entry (vLLM lists the checkpoint's path there)
        self.model_root = model_root
        #: sent with every completion, as OpenAI does (None: none, as vLLM and llama.cpp)
        self.system_fingerprint = system_fingerprint
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
        self._peers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._reset_counters_locked()
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
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
        """Zero the counters and forget recorded requests and the timeline (faults stay planned;
        requests still in flight stay counted in ``in_flight``)."""
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
        self._timeline: list[tuple[float, float]] = []
        self._delivered: list[tuple[str, str | None]] = []

    # -- counters -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL including ``/v1``, as OpenAI clients expect it."""
        if self.port is None:
            raise RuntimeError("the fake server is not running")
        return f"http://{LOOPBACK}:{self.port}/v1"

    @property
    def total_requests(self) -> int:
        """Generation (and embeddings) requests received, faulted ones included."""
        return self._total

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def connections(self) -> int:
        """TCP connections that carried a request (a client that reuses keep-alive connections
        opens few)."""
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

    def timeline(self) -> list[tuple[float, float]]:
        """``(arrival, reply)`` monotonic times of every generation request, in arrival order."""
        with self._lock:
            return list(self._timeline)

    def delivered(self) -> list[tuple[str, str | None]]:
        """``(prompt_key, content)`` of every chat/completions reply that carried a whole completion
        (no fault, or ``empty_content``, ``null_content``, ``lone_surrogate``, ``chunked``, ``slow``),
        in reply order (needs ``record=True``): what a client that stored an answer can have stored."""
        with self._lock:
            return list(self._delivered)

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

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=_MAX_BODY_BYTES, middlewares=[self._middleware])
        app.router.add_route("*", "/_admin/{name}", self._admin)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/extras/tokenize/count", self._tokenize)
        for path in _ENDPOINTS:
            app.router.add_post(path, self._generate)
        return app

    async def serve_async(self) -> None:
        """Start listening in the running event loop (returns once the port is bound)."""
        self._loop = asyncio.get_running_loop()
        self._runner = web.AppRunner(self._app(), access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, LOOPBACK, self._requested_port, backlog=4096)
        await site.start()
        server = site._server  # noqa: SLF001 - aiohttp exposes the bound port nowhere else
        assert isinstance(server, asyncio.base_events.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def close_async(self) -> None:
        """Stop listening and cut every open connection (slow replies included)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

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

    # -- handlers -----------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Count connections; unknown routes get an OpenAI-style error body, as real servers send."""
        transport = request.transport
        if transport is not None and transport not in self._peers:
            self._peers.add(transport)
            with self._lock:
                self._connections += 1
        try:
            return await handler(request)
        except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
            return _error_response(404, f"no route for {request.method} {request.path}", "invalid_request_error",
                                   "not_found")

    def _authorised(self, request: web.Request) -> web.Response | None:
        """None if the request may proceed, else the 401 to send."""
        if self._api_key is None or request.headers.get("Authorization") == f"Bearer {self._api_key}":
            return None
        return _error_response(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)  # vLLM's liveness route (no key needed)

    async def _models(self, request: web.Request) -> web.Response:
        refused = self._authorised(request)
        if refused is not None:
            return refused
        with self._lock:
            self._models_requests += 1
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake-openai"} for m in self.models]
        if self.max_model_len is not None:
            data = [{**entry, "max_model_len": self.max_model_len} for entry in data]
        if self.model_root is not None:
            data = [{**entry, "root": self.model_root, "created": int(time.time())} for entry in data]
        return _json_response(200, {"object": "list", "data": data})

    async def _tokenize(self, request: web.Request) -> web.Response:
        flavour = "vllm" if request.path == "/tokenize" else "llamacpp"
        if self.tokenize != flavour:
            return _error_response(404, f"no route for POST {request.path}", "invalid_request_error", "not_found")
        refused = self._authorised(request)
        if refused is not None:
            return refused
        with self._lock:
            self._tokenize_requests += 1
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error_response(400, "invalid JSON", "invalid_request_error")
        wanted = ("input",) if flavour == "llamacpp" else ("prompt", "messages")
        if not isinstance(body, dict) or not any(k in body for k in wanted):
            return _error_response(400, f"{' or '.join(wanted)} required", "invalid_request_error")
        if "messages" in body and not self.chat_template:
            return _error_response(400, "this model has no chat template", "invalid_request_error")
        count = fake_token_count(body)
        if flavour == "llamacpp":
            return _json_response(200, {"count": count})
        return _json_response(200, {"count": count, "max_model_len": self.max_model_len or 0,
                                    "tokens": list(range(count))})

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        endpoint = _ENDPOINTS[request.path]
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return _error_response(400, "request body is not valid JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return _error_response(400, "request body must be a JSON object", "invalid_request_error")
        refused = self._authorised(request)
        if refused is not None:
            return refused
        fake = FakeRequest("POST", request.path, {k.lower(): v for k, v in request.headers.items()}, body, endpoint)
        fault = self._admit(fake)
        try:
            delay = self.latency + (fault.delay_s if fault else 0.0)
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                return await self._answer(request, fake, fault)
            except Exception as exc:  # a broken test responder: say so instead of dropping
                traceback.print_exc(file=sys.stderr)
                return _error_response(500, f"fake server error: {exc!r}", "server_error")
        finally:
            with self._lock:
                self._in_flight -= 1
                self._timeline.append((arrived, time.monotonic()))

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

    async def _answer(self, request: web.Request, fake: FakeRequest, fault: Fault | None) -> web.StreamResponse:
        kind = fault.kind if fault is not None else None
        if fault is not None and kind == "status":
            return self._status_fault(fault)
        if kind == "echo_auth":
            shown = request.headers.get("Authorization", "(none)")
            return _error_response(401, f"invalid credentials: {shown}", "invalid_request_error", "invalid_api_key")
        if kind == "drop":
            request.transport.abort()  # type: ignore[union-attr]
            return web.Response()  # never sent: the connection is gone
        body, endpoint = fake.body, fake.endpoint
        model = body.get("model")
        if model not in self.models:
            return _error_response(404, f"The model `{model}` does not exist.", "invalid_request_error",
                                   "model_not_found", param="model")
        invalid = _invalid_request(endpoint, body)
        if invalid is not None:
            return invalid
        if kind == "wrong_shape":
            return _json_response(200, {"object": "chat.completion", "choices": []})
        completion: str | None = None  # the content of a generated completion, if this reply is one
        if endpoint == "embeddings":
            payload = self._embeddings_json(body)
        elif endpoint == "completions" and body.get("echo") and body.get("logprobs") is not None and self.logprobs:
            payload = self._logprobs_json(body)
        else:
            if kind in ("empty_content", "null_content"):
                text: str | None = "" if kind == "empty_content" else None
            elif kind == "lone_surrogate":
                text = LONE_SURROGATE
            else:
                text = self.responder(body)
                text = _apply_stop(text, body.get("stop")) if text is not None else None
            payload = self._completion_json(endpoint, body, text)
            completion = text
            if self.record and kind not in ("malformed_json", "drop_mid"):
                with self._lock:
                    self._delivered.append((prompt_key(body), text))
        # ASCII escapes where UTF-8 cannot carry the text (a responder's lone surrogate): valid JSON,
        # as a real server sends it
        ascii_only = kind == "lone_surrogate" or (completion is not None and not _utf8_encodable(completion))
        encoded = json.dumps(payload, ensure_ascii=ascii_only, separators=(",", ":")).encode("utf-8")
        if kind == "malformed_json":
            encoded = encoded[: max(1, len(encoded) // 2)]
        if kind in ("drop_mid", "chunked"):
            return await self._stream(request, encoded, cut=kind == "drop_mid")
        return web.Response(status=200, body=encoded, content_type="application/json")

    @staticmethod
    async def _stream(request: web.Request, payload: bytes, *, cut: bool) -> web.StreamResponse:
        """``chunked``: the payload in small chunks; ``drop_mid``: half of it under a Content-Length
        for all of it, then the connection is cut."""
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        if cut:
            response.content_length = len(payload)
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        if cut:
            await response.write(payload[: len(payload) // 2])
            request.transport.abort()  # type: ignore[union-attr]
            return response
        for i in range(0, len(payload), _CHUNK_BYTES):
            await response.write(payload[i : i + _CHUNK_BYTES])
        await response.write_eof()
        return response

    def _completion_json(self, endpoint: str | None, body: JSONDict, text: str | None) -> JSONDict:
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
            **({"system_fingerprint": self.system_fingerprint} if self.system_fingerprint else {}),
            "model": body["model"],
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _logprobs_json(self, body: JSONDict) -> JSONDict:
        """Echoed prompt tokens with log-probabilities (see the module docstring), one choice per prompt."""
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        choices = []
        for index, prompt in enumerate(prompts):
            tokens = re.findall(r"\s*\S+", prompt) or [prompt]
            offsets = [0]
            for token in tokens[:-1]:
                offsets.append(offsets[-1] + len(token))
            context, last = prompt[: offsets[-1]], tokens[-1]
            preferred = (self.responder({**body, "prompt": context}) or "").strip()
            values: list[float | None] = [None] + [-1.0] * (len(tokens) - 1)
            values[-1] = -0.1 if last.strip() == preferred else -3.0
            if len(tokens) == 1:
                values = [None]
            tokens, offsets, values = [*tokens, " x"], [*offsets, len(prompt)], [*values, -0.5]
            choices.append({"index": index, "text": prompt + " x", "finish_reason": "length",
                            "logprobs": {"tokens": tokens, "token_logprobs": values, "text_offset": offsets,
                                         "top_logprobs": None}})
        prompt_tokens = sum(len(c["logprobs"]["tokens"]) - 1 for c in choices)
        return {"id": f"cmpl-fake-{next(self._ids)}", "object": "text_completion", "created": int(time.time()),
                "model": body["model"], "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(choices),
                          "total_tokens": prompt_tokens + len(choices)}}

    @staticmethod
    def _embeddings_json(body: JSONDict) -> JSONDict:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(str(t))} for i, t in enumerate(texts)]
        # reversed, as servers may reorder: clients must put rows back by index
        return {"object": "list", "data": data[::-1], "model": body["model"],
                "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)}}

    @staticmethod
    def _status_fault(fault: Fault) -> web.Response:
        assert fault.status is not None
        headers: dict[str, str] = {}
        if fault.retry_after_s is not None:
            if fault.retry_after_as_date:
                headers["Retry-After"] = email.utils.formatdate(time.time() + fault.retry_after_s, usegmt=True)
            else:
                headers["Retry-After"] = f"{fault.retry_after_s:g}"
        type_ = "rate_limit_error" if fault.status == 429 else (
            "server_error" if fault.status >= 500 else "invalid_request_error"
        )
        message = fault.message or f"injected fault: HTTP {fault.status}"
        return _error_response(fault.status, message, type_, str(fault.status), headers=headers)

    async def _admin(self, request: web.Request) -> web.Response:
        """Control endpoints for a server in another process (see :class:`FakeOpenAIProcess`)."""
        name, method = request.match_info["name"], request.method
        if name == "stats" and method == "GET":
            return _json_response(200, self.stats())
        if name == "requests" and method == "GET":
            return _json_response(200, [r.body for r in self.requests], ascii_only=True)
        if name == "timeline" and method == "GET":
            return _json_response(200, self.timeline())
        if name == "faults" and method == "POST":
            try:
                spec = json.loads(await request.read() or b"{}")
                self.plan_faults(spec.get("faults", []), int(spec.get("count", 1)))
            except (ValueError, TypeError, AttributeError) as exc:
                return _error_response(400, str(exc), "invalid_request_error")
            return _json_response(200, {"faults_pending": len(self._faults)})
        if name == "reset" and method == "POST":
            self.clear_faults()
            self.reset_counters()
            return _json_response(200, {"reset": True})
        return _error_response(404, f"no admin route {method} {request.path}", "invalid_request_error")


def _invalid_request(endpoint: str | None, body: JSONDict) -> web.Response | None:
    """The 400 a real server sends for a body without its endpoint's required field, else None."""
    if endpoint == "chat" and not (isinstance(body.get("messages"), list) and body["messages"]):
        return _error_response(400, "'messages' must be a non-empty list", "invalid_request_error", param="messages")
    if endpoint == "completions" and not isinstance(body.get("prompt"), (str, list)):
        return _error_response(400, "'prompt' is required", "invalid_request_error", param="prompt")
    if endpoint == "embeddings" and not isinstance(body.get("input"), (str, list)):
        return _error_response(400, "'input' is required", "invalid_request_error", param="input")
    return None


# --------------------------------------------------------------------------------------------
# Subprocess mode


_REPO_ROOT = Path(__file__).resolve().parents[2]


class FakeOpenAIProcess:
    """The fake server in a child process (``python -m tests.support.fake_openai``).

    Use it where the server must not share the client's process: throughput benches (the
    server's CPU would steal the client's GIL) and tests that kill the client mid-run. Counters,
    fault plans and the timeline go through the ``/_admin`` endpoints.
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
        """One control request (blocking; the standard library's client works inside or outside an
        event loop, and this is test support, not evalpipe)."""
        root = self.url.removesuffix("/v1")
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(root + path, data=data, method="GET" if data is None else "POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def stats(self) -> JSONDict:
        return self._admin("/_admin/stats")

    def timeline(self) -> list[tuple[float, float]]:
        """``(arrival, reply)`` monotonic times of every generation request since the last reset."""
        return [tuple(pair) for pair in self._admin("/_admin/timeline")]  # type: ignore[misc]

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
    parser.add_argument("--max-model-len", type=int, help="report this context length in /v1/models")
    parser.add_argument("--tokenize", choices=("vllm", "llamacpp"), help="serve that tokenizer endpoint")
    parser.add_argument("--no-logprobs", action="store_true", help="ignore echo/logprobs (no prompt log-probabilities)")
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
        max_model_len=args.max_model_len,
        tokenize=args.tokenize or False,
        logprobs=not args.no_logprobs,
    )
    server.plan_faults([*faults, *args.fault])
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_until_signalled(server))
    return 0


if __name__ == "__main__":
    sys.exit(main())
