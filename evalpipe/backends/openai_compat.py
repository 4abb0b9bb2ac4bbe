"""Backend for any OpenAI-compatible HTTP endpoint (vLLM, TGI, llama.cpp server, OpenAI itself).

Design decisions, and why:

* **Our retries, not the SDK's.** ``AsyncOpenAI(max_retries=0)``; retries run in tenacity
  (from the second attempt on, see :meth:`OpenAICompatBackend._retry` for why) so that every
  attempt is counted (``Completion.attempts``, :meth:`stats`), 429s feed the adaptive
  limiter, and malformed 200 responses (which the SDK does not retry) are retried too.
  Retried: connection errors, timeouts, HTTP 408/409/429/5xx, malformed JSON. Not retried: other
  4xx (a bad request stays bad). Backoff is exponential with jitter; a 429's ``Retry-After``
  (seconds or HTTP-date) is waited out in full, capped at ``retry_after_max_s``.
* **Failures are values.** After the last attempt :meth:`OpenAICompatBackend.complete` returns
  ``Completion(text=None, error="HTTP 500 after 7 attempts: …", attempts=7)``; it never raises
  for a failed request (see :mod:`evalpipe.backends.base`).
* **Empty content is an answer, not an error.** ``content`` of ``""`` or ``null`` gives
  ``Completion(text="")``: the server did answer, a retry at temperature 0 would answer the same,
  and the parser counts it as a parse failure, which is what it is for the metrics.
* **Adaptive concurrency.** An :class:`~evalpipe.backends.limiter.AIMDLimiter` keeps at most
  ``concurrency`` requests in flight and halves that on 429s (see its module docstring). The
  slot is held only while a request is on the wire, not during backoff sleeps.
* **A lean transport for plain HTTP.** For an ``http://`` endpoint (local vLLM, llama.cpp) with
  no proxy configured, the SDK's client runs on
  :class:`~evalpipe.backends.http_transport.KeepAliveTransport`: one keep-alive pool of
  ``concurrency`` connections at about half the CPU of the standard httpx2/httpcore2 stack,
  which is what sets the pace at 1,000+ requests/s (see that module).
* **Otherwise, standard pools sized for the concurrency, and split.** httpcore's pool
  re-examines every pooled connection (a ``poll()`` syscall per idle one) on each request, so one
  pool of 256 connections costs ~1 ms of CPU per request. For ``https://`` or proxied endpoints
  the backend therefore keeps one small client (``_CONNECTIONS_PER_POOL`` connections, keep-alive
  for all of them) per group of in-flight slots; a request uses the pool of the slot it holds,
  so no pool ever queues or overflows.
* **Generic SDK request path.** Requests go through ``AsyncOpenAI.post`` with the plain JSON
  body, and the reply is decoded with :func:`json.loads`. ``chat.completions.create`` would do the
  same HTTP exchange but first walks the whole message list through the SDK's TypedDict
  transformer and builds pydantic models for the reply: ~0.5 ms of CPU per request, a third of
  the client's budget at 1,000+ requests/s. The SDK still supplies auth headers, timeouts, error
  classes and the connection handling.
* **The API key is never shown.** The config holds only the *name* of the environment variable;
  the value is read once, handed to the SDK, and scrubbed from any server text we quote.

Use one backend inside one event loop (its connections belong to that loop), and
``await backend.aclose()`` at the end.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import os
import random
import ssl
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import httpx2
import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from evalpipe.backends.base import BackendError, Secret
from evalpipe.backends.http_transport import make_async_client, uses_keepalive_transport
from evalpipe.backends.limiter import AIMDLimiter
from evalpipe.endpoints import redact_url
from evalpipe.records import Completion, Prompt, Usage, chat_payload

__all__ = ["OpenAICompatBackend", "OpenAICompatConfig", "parse_retry_after"]

log = logging.getLogger(__name__)

#: connections per underlying HTTP client (see "Connection pools" in the module docstring)
_CONNECTIONS_PER_POOL = 4
#: status codes worth another attempt besides 5xx
_RETRY_STATUSES = frozenset({408, 409, 429})
_DETAIL_MAX_CHARS = 200
_PREFLIGHT_TRIES = 2
_MAX_MODELS_LISTED = 20
_NOT_OPENAI_HINT = "is this an OpenAI-compatible endpoint?"


@dataclass(frozen=True)
class OpenAICompatConfig:
    """Everything needed to talk to one endpoint. Holds no secret: only ``api_key_env``'s name.

    ``base_url`` is the API root including ``/v1`` (``http://localhost:8000/v1``).
    ``timeout_s`` bounds one attempt from start to last byte; ``max_retries`` counts attempts
    after the first. Backoff before retry *n* (1-based) is ``backoff_base_s * 2**(n-1)`` plus up to
    ``backoff_base_s`` of jitter, capped at ``backoff_max_s``. ``rate_limit_window_s`` is how
    often a burst of 429s may halve the concurrency limit.
    """

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 64
    timeout_s: float = 120.0
    max_retries: int = 6
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 60.0
    connect_timeout_s: float = 10.0
    preflight_timeout_s: float = 5.0
    rate_limit_window_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise BackendError(f"base_url must start with http:// or https:// (got {redact_url(self.base_url)!r})")
        if not self.model:
            raise BackendError("model must be set (the name the endpoint serves it under)")
        if self.concurrency < 1:
            raise BackendError(f"concurrency must be at least 1 (got {self.concurrency})")
        if self.max_retries < 0:
            raise BackendError(f"max_retries must be 0 or more (got {self.max_retries})")
        for name in ("timeout_s", "connect_timeout_s", "preflight_timeout_s"):
            if getattr(self, name) <= 0:
                raise BackendError(f"{name} must be positive (got {getattr(self, name)})")
        for name in ("backoff_base_s", "backoff_max_s", "retry_after_max_s", "rate_limit_window_s"):
            if getattr(self, name) < 0:
                raise BackendError(f"{name} must not be negative (got {getattr(self, name)})")


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delta-seconds or an HTTP-date; None if absent
    or unreadable. Dates in the past give 0."""
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = moment.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


class _AttemptError(Exception):
    """One failed attempt, already classified: a short ``reason`` and whether to try again."""

    def __init__(self, reason: str, *, retryable: bool, detail: str | None = None, retry_after_s: float | None = None):
        super().__init__(reason if detail is None else f"{reason}: {detail}")
        self.reason = reason
        self.retryable = retryable
        self.detail = detail
        self.retry_after_s = retry_after_s


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, _AttemptError) and exc.retryable


@dataclass
class _Counters:
    """Mutable tallies behind :meth:`OpenAICompatBackend.stats`."""

    requests_sent: int = 0
    successes: int = 0
    failures: int = 0
    retries: int = 0
    rate_limited: int = 0
    empty_answers: int = 0
    chat_prompts: int = 0
    completions_prompts: int = 0


class OpenAICompatBackend:
    """The :class:`~evalpipe.backends.base.Backend` for OpenAI-compatible endpoints.

    ``prompt.endpoint`` picks ``/chat/completions`` (``Prompt.messages``) or ``/completions``
    (``Prompt.text``). Sent parameters: ``max_tokens``, ``temperature`` (0 → greedy), and
    ``top_p``, ``seed``, ``stop`` only when set.
    """

    def __init__(self, config: OpenAICompatConfig) -> None:
        self.config = config
        self.model = config.model
        self.base_url = config.base_url.rstrip("/")
        #: the URL as shown in messages, logs, config.json and samples: without user-info or query
        self.shown_url = redact_url(self.base_url)
        self._key_was_set = bool(os.environ.get(config.api_key_env))
        self._secret = Secret(os.environ.get(config.api_key_env) or "EMPTY")
        self._limiter = AIMDLimiter(config.concurrency, decrease_window_s=config.rate_limit_window_s)
        lean = uses_keepalive_transport(self.base_url)
        self._pool_size = config.concurrency if lean else min(_CONNECTIONS_PER_POOL, config.concurrency)
        # once, not per client: building one costs ~30 ms (the lean transport needs one only
        # if redirected to https, and then builds it itself)
        ssl_context = None if lean else httpx2.create_ssl_context()
        self._clients = [
            self._make_client(ssl_context) for _ in range(math.ceil(config.concurrency / self._pool_size))
        ]
        self._free_slots = list(range(config.concurrency))  # LIFO: the busiest pools stay warm
        self._retrying = AsyncRetrying(
            stop=stop_after_attempt(config.max_retries),  # the first attempt runs before it
            wait=self._wait,
            retry=retry_if_exception(_is_retryable),
            before_sleep=self._before_sleep,
            reraise=True,
        )
        self._counts = _Counters()
        self._errors: Counter[str] = Counter()
        self._urls = {"chat": f"{self.shown_url}/chat/completions", "completions": f"{self.shown_url}/completions"}

    def _make_client(self, ssl_context: ssl.SSLContext | None) -> openai.AsyncOpenAI:
        cfg = self.config
        timeout = httpx2.Timeout(cfg.timeout_s, connect=min(cfg.connect_timeout_s, cfg.timeout_s))
        http_client = make_async_client(
            self.base_url,
            timeout=timeout,
            max_connections=self._pool_size,
            verify=ssl_context if ssl_context is not None else True,
        )
        return openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self._secret.reveal(),
            max_retries=0,
            timeout=timeout,
            http_client=http_client,
        )

    def __repr__(self) -> str:
        return (
            f"OpenAICompatBackend(base_url={self.shown_url!r}, model={self.model!r}, "
            f"concurrency={self.config.concurrency}, api_key_env={self.config.api_key_env!r})"
        )

    # -- Backend protocol ---------------------------------------------------------------------

    async def preflight(self) -> None:
        """Check the endpoint answers ``GET /models`` and lists ``model``; raise BackendError if not.

        Fails fast: two short tries, so a wrong port stops a run in about a second instead of
        after the full retry schedule.
        """
        data = await self._get_models()
        served = _model_ids(data)
        if served is None:
            raise BackendError(f"{self.shown_url}/models did not return an OpenAI model list; {_NOT_OPENAI_HINT}")
        if self.model not in served:
            shown = ", ".join(served[:_MAX_MODELS_LISTED]) or "no models"
            more = f" (and {len(served) - _MAX_MODELS_LISTED} more)" if len(served) > _MAX_MODELS_LISTED else ""
            raise BackendError(f"{self.shown_url} does not serve model {self.model!r}; it serves: {shown}{more}")

    async def complete(self, prompt: Prompt) -> Completion:
        """Send one prompt with retries; a request that fails for good comes back as an error value."""
        started = time.perf_counter()
        endpoint = prompt.endpoint
        path, body = self._request(prompt)
        tries = [1]  # a cell, so _retry can count while it raises
        try:
            try:
                text, finish_reason, usage = await self._attempt(path, body)
            except _AttemptError as first:
                if not first.retryable or self.config.max_retries == 0:
                    raise
                text, finish_reason, usage = await self._retry(path, body, first, tries)
        except _AttemptError as err:
            return self._failed(err.reason, err.detail, tries[0], started, endpoint)
        except Exception as err:  # a bug or an SDK surprise: one sample fails, the run goes on
            log.warning("unexpected %s from %s", type(err).__name__, self.shown_url, exc_info=True)
            return self._failed(f"unexpected {type(err).__name__}", str(err), tries[0], started, endpoint)
        attempts = tries[0]
        self._counts.successes += 1
        self._counts.retries += attempts - 1
        self._counts.empty_answers += text == ""
        return Completion(
            text=text,
            finish_reason=finish_reason,
            usage=usage,
            latency_s=time.perf_counter() - started,
            attempts=attempts,
            endpoint_url=self._urls[endpoint],
        )

    async def aclose(self) -> None:
        """Close every connection pool."""
        await asyncio.gather(*(client.close() for client in self._clients), return_exceptions=True)

    def describe(self) -> Mapping[str, Any]:
        """Options for ``config.json``: the API key's environment variable *name*, never its value."""
        options = asdict(self.config)
        options["base_url"] = self.shown_url
        options["backend"] = "openai_compat"
        options["endpoints"] = dict(self._urls)
        options["api_key_set"] = self._key_was_set
        return options

    def stats(self) -> Mapping[str, Any]:
        """Counters for the run summary; ``errors`` counts failed *attempts* by reason."""
        counts = asdict(self._counts)
        counts["errors"] = dict(self._errors)
        counts["concurrency_max"] = self.config.concurrency
        counts["concurrency_limit"] = self._limiter.limit
        counts["concurrency_limit_min"] = self._limiter.min_reached
        counts["concurrency_decreases"] = self._limiter.decreases
        counts["peak_in_flight"] = self._limiter.peak_in_flight
        return counts

    # -- one request --------------------------------------------------------------------------

    def _request(self, prompt: Prompt) -> tuple[str, dict[str, Any]]:
        """The path and JSON body for a prompt, built once and reused by every retry."""
        body: dict[str, Any] = {"model": self.model, **prompt.params.sampling_options()}
        if prompt.messages is not None:
            self._counts.chat_prompts += 1
            body["messages"] = chat_payload(prompt.messages)
            return "/chat/completions", body
        self._counts.completions_prompts += 1
        body["prompt"] = prompt.text
        return "/completions", body

    async def _attempt(self, path: str, body: dict[str, Any]) -> tuple[str, str | None, Usage]:
        """One HTTP exchange, with every failure turned into a classified :class:`_AttemptError`."""
        try:
            response = await self._send(path, body)
        except _AttemptError as err:
            self._errors[err.reason] += 1
            raise
        try:
            answer = _parse_answer(response.content, chat=path == "/chat/completions")
        except _AttemptError as err:
            self._errors[err.reason] += 1
            raise
        self._limiter.on_success()
        return answer

    async def _send(self, path: str, body: dict[str, Any]) -> httpx2.Response:
        """POST under a limiter slot, on that slot's connection pool, within ``timeout_s``."""
        async with self._limiter:
            slot = self._free_slots.pop()
            self._counts.requests_sent += 1
            try:
                async with asyncio.timeout(self.config.timeout_s):
                    return await self._clients[slot // self._pool_size].post(
                        path,
                        body=body,
                        cast_to=httpx2.Response,
                        options={"security": {"bearer_auth": True}},
                    )
            except openai.APIStatusError as err:
                raise self._status_error(err) from None
            except (openai.APITimeoutError, TimeoutError):
                raise _AttemptError("timeout", retryable=True) from None
            except openai.APIConnectionError as err:
                cause = err.__cause__
                raise _AttemptError(
                    "connection error", retryable=True, detail=type(cause).__name__ if cause else None
                ) from None
            finally:
                self._free_slots.append(slot)

    def _status_error(self, err: openai.APIStatusError) -> _AttemptError:
        status = err.status_code
        retry_after = None
        if status == 429:
            self._counts.rate_limited += 1
            if self._limiter.on_overload():
                log.info("HTTP 429 from %s: concurrency limit lowered to %d", self.shown_url, self._limiter.limit)
            headers = err.response.headers
            retry_after = parse_retry_after(headers.get("retry-after"))
            if retry_after is None and headers.get("retry-after-ms"):
                retry_after = (parse_retry_after(headers.get("retry-after-ms")) or 0.0) / 1000
        return _AttemptError(
            f"HTTP {status}",
            retryable=status in _RETRY_STATUSES or status >= 500,
            detail=self._short(_error_message(err.body)),
            retry_after_s=retry_after,
        )

    # -- retry plumbing -----------------------------------------------------------------------

    async def _retry(
        self, path: str, body: dict[str, Any], first: _AttemptError, tries: list[int]
    ) -> tuple[str, str | None, Usage]:
        """Attempts 2 … max_retries+1, under tenacity; ``tries[0]`` tracks the count.

        The first attempt runs outside tenacity on purpose: every tenacity run builds ~30
        objects in reference cycles, and at 10,000 requests the garbage collections they trigger
        (each one walking every pending request) cost more client CPU than the HTTP stack.
        """
        delay = self._delay(first, retry_number=1)
        log.debug("attempt 1 to %s failed (%s); retrying in %.2fs", self.shown_url, first, delay)
        await asyncio.sleep(delay)
        async for attempt in self._retrying.copy():
            with attempt:
                tries[0] += 1
                return await self._attempt(path, body)
        raise AssertionError("unreachable: tenacity either returns or re-raises")

    def _delay(self, err: BaseException | None, retry_number: int) -> float:
        """Wait before retry ``retry_number`` (1-based): a 429's Retry-After (capped) plus a little
        jitter when given, else ``backoff_base_s * 2**(n-1)`` plus up to ``backoff_base_s`` jitter,
        capped at ``backoff_max_s``."""
        cfg = self.config
        if isinstance(err, _AttemptError) and err.retry_after_s is not None:
            return min(err.retry_after_s, cfg.retry_after_max_s) + random.uniform(0, min(cfg.backoff_base_s, 1.0))
        exponential = cfg.backoff_base_s * 2.0 ** min(retry_number - 1, 60)
        return min(exponential + random.uniform(0, cfg.backoff_base_s), cfg.backoff_max_s)

    def _wait(self, state: RetryCallState) -> float:
        """tenacity's wait hook; its attempt 1 is our attempt 2, so the retry number is the same."""
        exc = state.outcome.exception() if state.outcome is not None else None
        return self._delay(exc, retry_number=state.attempt_number + 1)

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.debug("attempt %d to %s failed (%s); retrying in %.2fs", state.attempt_number + 1, self.shown_url, exc, wait)

    def _failed(self, reason: str, detail: str | None, attempts: int, started: float, endpoint: str) -> Completion:
        self._counts.failures += 1
        self._counts.retries += max(0, attempts - 1)
        plural = "" if attempts == 1 else "s"
        message = f"{reason} after {attempts} attempt{plural}"
        if detail:
            message += f": {self._short(detail)}"
        log.info("request to %s failed: %s", self._urls[endpoint], message)
        return Completion(
            text=None,
            latency_s=time.perf_counter() - started,
            attempts=attempts,
            error=message,
            endpoint_url=self._urls[endpoint],
        )

    def _short(self, text: str | None) -> str | None:
        """One line, at most ``_DETAIL_MAX_CHARS``, with the API key scrubbed."""
        if not text:
            return None
        line = " ".join(self._secret.scrub(text).split())
        return line if len(line) <= _DETAIL_MAX_CHARS else line[: _DETAIL_MAX_CHARS - 1] + "…"

    # -- preflight ----------------------------------------------------------------------------

    async def _get_models(self) -> Any:
        """``GET /models`` with short timeouts; turn every way it can fail into a BackendError."""
        per_try = self.config.preflight_timeout_s / _PREFLIGHT_TRIES
        client = self._clients[0]
        last = ""
        for attempt in range(_PREFLIGHT_TRIES):
            if attempt:
                await asyncio.sleep(min(0.25, per_try))
            try:
                async with asyncio.timeout(per_try):
                    options: Any = {"timeout": per_try, "security": {"bearer_auth": True}}
                    response = await client.get("/models", cast_to=httpx2.Response, options=options)
            except openai.APIStatusError as err:
                raise self._preflight_status_error(err) from None
            except (openai.APIConnectionError, TimeoutError) as err:
                last = _connection_reason(err)
                continue
            try:
                return json.loads(response.content)
            except ValueError:
                raise BackendError(f"{self.shown_url}/models did not return JSON; {_NOT_OPENAI_HINT}") from None
        raise BackendError(f"cannot reach {self.shown_url} ({self._short(last)}); is the server running?")

    def _preflight_status_error(self, err: openai.APIStatusError) -> BackendError:
        status, env = err.status_code, self.config.api_key_env
        if status in (401, 403):
            if not self._key_was_set:
                return BackendError(
                    f"{self.shown_url} refused the request (HTTP {status}) and environment variable {env} is not set; "
                    f"export the API key as {env}"
                )
            return BackendError(f"{self.shown_url} rejected the API key from environment variable {env} (HTTP {status})")
        if status == 404:
            return BackendError(
                f"GET {self.shown_url}/models returned HTTP 404; is the base URL right? "
                "OpenAI-compatible servers usually serve under .../v1"
            )
        detail = self._short(_error_message(err.body))
        return BackendError(f"GET {self.shown_url}/models returned HTTP {status}" + (f": {detail}" if detail else ""))


def _parse_answer(raw: bytes, *, chat: bool) -> tuple[str, str | None, Usage]:
    """Text, finish reason and usage from a 200 body; empty or null content is ``""``."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise _AttemptError("malformed JSON response", retryable=True) from None
    try:
        choice = data["choices"][0]
        content = choice["message"].get("content") if chat else choice.get("text")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise _AttemptError("unexpected response shape", retryable=True) from None
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise _AttemptError("unexpected response shape", retryable=True, detail="content is not a string")
    usage = data.get("usage") if isinstance(data, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    return content, choice.get("finish_reason"), Usage(usage.get("prompt_tokens"), usage.get("completion_tokens"))


def _error_message(body: object) -> str | None:
    """The human part of an OpenAI-style error body (``{"message": ...}``), else its text."""
    if isinstance(body, Mapping):
        message = body.get("message")
        return message if isinstance(message, str) else json.dumps(body)[:_DETAIL_MAX_CHARS]
    return str(body) if body else None


def _connection_reason(err: BaseException) -> str:
    """What went wrong at the socket level, as specific as the exception chain allows
    (``Connection refused`` beats httpx's ``All connection attempts failed``)."""
    if isinstance(err, (openai.APITimeoutError, TimeoutError)):
        return "timed out"
    seen: list[BaseException] = []
    link: BaseException | None = err
    while link is not None and link not in seen and len(seen) < 10:
        seen.append(link)
        link = link.__cause__ or link.__context__
    for link in reversed(seen):
        if isinstance(link, OSError) and (link.errno or link.strerror):
            return os.strerror(link.errno) if link.errno else str(link.strerror)
    cause = seen[1] if len(seen) > 1 else err
    text = str(cause).strip()
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


def _model_ids(data: Any) -> list[str] | None:
    """Model ids from a ``/models`` reply, or None if it is not shaped like one."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    return [str(item["id"]) for item in items if isinstance(item, dict) and "id" in item]
