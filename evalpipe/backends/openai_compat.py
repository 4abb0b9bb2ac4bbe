"""Backend for any OpenAI-compatible HTTP endpoint (vLLM, TGI, llama.cpp server, OpenAI itself).

Design decisions, and why:

* **aiohttp underneath, nothing of ours on the wire** (:mod:`evalpipe.backends.client`): one
  keep-alive pool per endpoint; the request path is build-JSON-once, POST, ``json.loads``.
* **One retry policy** (:mod:`evalpipe.backends.retry`, tenacity) for every request: retried are
  connection errors, timeouts, HTTP 408/409/429/5xx, malformed JSON and 200s that are no
  completion; not retried: other 4xx (a bad request stays bad). Every attempt is counted
  (``Completion.attempts``, :meth:`stats`).
* **Failures are values.** After the last attempt :meth:`OpenAICompatBackend.complete` returns
  ``Completion(text=None, error="HTTP 500 after 7 attempts: …", attempts=7)``; it never raises
  for a failed request (see :mod:`evalpipe.backends.base`).
* **Empty content is an answer, not an error.** ``content`` of ``""`` or ``null`` gives
  ``Completion(text="")``: the server did answer, a retry at temperature 0 would answer the same,
  and the parser counts it as a parse failure, which is what it is for the metrics.
* **An answer is text we can store.** JSON may carry a lone surrogate (``"\\udcff"``) that no
  UTF-8 file or database can hold; it becomes U+FFFD here, at the border, and is counted
  (``invalid_unicode_answers``), so one hostile answer cannot stop a run.
* **Adaptive concurrency.** An :class:`~evalpipe.backends.limiter.AIMDLimiter` keeps at most
  ``concurrency`` requests in flight and halves that on 429s (see its module docstring). The
  slot is held only while a request is on the wire, not during backoff sleeps.
* **What the server knows, asked once.** :meth:`models` (``GET /models``) is fetched once and
  shared by :meth:`preflight` and :meth:`context_length`; :meth:`count_tokens` asks the server's
  tokenizer (vLLM's ``POST /tokenize``, llama.cpp's ``POST /extras/tokenize/count``, whichever
  answers) on the same keep-alive pool, many at once, each distinct text once.
* **Log-likelihood of options** (:meth:`OpenAICompatBackend.complete` of a ``Prompt`` with
  ``choices``): one ``/completions`` request whose ``prompt`` is the list of prompt + continuation
  texts, with ``echo`` and ``logprobs`` (as lm-evaluation-harness asks vLLM), ``max_tokens`` 1; each
  continuation's log-probability is the sum over the echoed tokens that start at or after the end of
  the prompt text (``logprobs.text_offset``) and before its own end. The answer stored is
  ``{"logprobs": {continuation: sum}, "tokens": {continuation: count}}``. A server that returns no
  prompt log-probabilities (no echo, OpenAI's chat-only models, llama.cpp's server) is told apart by
  :meth:`check_choice_scoring`, one short probe before a run, with a one-line error.
  :meth:`~OpenAICompatBackend.prompt_logprobs` is the same echo request for one text, giving every
  token's log-probability (the contamination probe's Min-K % Prob).
* **Credentials are never shown or stored.** The config holds only the *name* of the key's
  environment variable; every error text *and every answer* passes :meth:`Credentials.scrub`, which
  knows the key, the Bearer header, URL user-info and its Basic header, and query-string secrets —
  a server (or a model prompted to) may echo any of them in a 200 reply. An answer that held one is
  stored with ``***`` in its place and counted (``scrubbed_answers``); judges' replies come through
  this backend too.
* **Replies are bounded** (:mod:`evalpipe.backends.client`): a body over ``max_answer_bytes`` is a
  failure (``answer too large``) read no further and never stored; JSON nested too deep is refused.
* **Usage is checked**: a token count that is not a whole number in 0…10⁹ (``Infinity``, ``NaN``,
  negative, a string) makes the reply's usage absent, counted as ``invalid_usage``, never stored.

Use one backend inside one event loop (its connections belong to that loop), and
``await backend.aclose()`` at the end.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from evalpipe.backends.base import BackendError, Credentials
from evalpipe.backends.client import DEFAULT_MAX_BODY_BYTES, EndpointClient, decode_json, one_line
from evalpipe.backends.limiter import AIMDLimiter
from evalpipe.backends.liveness import AFTER_S, EndpointGone, Liveness
from evalpipe.backends.retry import GaveUp, RequestFailed, RetryPolicy, call_with_retries, parse_retry_after
from evalpipe.backends.wire import Answer, asks_for_max_completion_tokens, read_answer, request_body, usage_of
from evalpipe.endpoints import redact_url, route_record
from evalpipe.records import Completion, GenerationParams, Message, Prompt, Usage, chat_payload

__all__ = ["OpenAICompatBackend", "OpenAICompatConfig", "parse_retry_after"]

log = logging.getLogger(__name__)

#: tries for the model list and the tokenizer probe: a wrong port should stop a run in a second
_PROBE_TRIES = 2
_MAX_MODELS_LISTED = 20
_NOT_OPENAI_HINT = "is this an OpenAI-compatible endpoint?"
_SURROGATES = re.compile("[\ud800-\udfff]")
#: tokenizer endpoints, tried in this order: (flavour, path under the server root)
_TOKENIZERS = (("vllm", "/tokenize"), ("llamacpp", "/extras/tokenize/count"))
_PROBE_TEXT = "hello"


@dataclass(frozen=True)
class OpenAICompatConfig:
    """Everything needed to talk to one endpoint. Holds no secret: only ``api_key_env``'s name.

    ``base_url`` is the API root including ``/v1`` (``http://localhost:8000/v1``).
    ``timeout_s`` bounds one attempt from start to last byte; ``max_retries`` counts attempts
    after the first. Backoff before retry *n* (1-based) is ``backoff_base_s * 2**(n-1)`` plus up to
    ``backoff_base_s`` of jitter, capped at ``backoff_max_s``; a 429's Retry-After is waited out,
    capped at ``retry_after_max_s``. ``rate_limit_window_s`` is how often a burst of 429s may halve
    the concurrency limit.
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
    #: stop the run when nothing but failed connections came for this long (0 = never;
    #: :mod:`evalpipe.backends.liveness`)
    unreachable_after_s: float = AFTER_S
    #: the largest reply body read (see :data:`evalpipe.backends.client.DEFAULT_MAX_BODY_BYTES`)
    max_answer_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise BackendError(f"base_url must start with http:// or https:// (got {redact_url(self.base_url)!r})")
        if not self.model:
            raise BackendError("model must be set (the name the endpoint serves it under)")
        if self.concurrency < 1:
            raise BackendError(f"concurrency must be at least 1 (got {self.concurrency})")
        if self.max_retries < 0:
            raise BackendError(f"max_retries must be 0 or more (got {self.max_retries})")
        if self.max_answer_bytes < 1:
            raise BackendError(f"max_answer_bytes must be at least 1 (got {self.max_answer_bytes})")
        for name in ("timeout_s", "connect_timeout_s", "preflight_timeout_s"):
            if getattr(self, name) <= 0:
                raise BackendError(f"{name} must be positive (got {getattr(self, name)})")
        for name in ("backoff_base_s", "backoff_max_s", "retry_after_max_s", "rate_limit_window_s",
                     "unreachable_after_s"):
            if getattr(self, name) < 0:
                raise BackendError(f"{name} must not be negative (got {getattr(self, name)})")

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_retries, self.backoff_base_s, self.backoff_max_s, self.retry_after_max_s)


@dataclass
class _Counters:
    """Mutable tallies behind :meth:`OpenAICompatBackend.stats`."""

    requests_sent: int = 0
    successes: int = 0
    failures: int = 0
    retries: int = 0
    rate_limited: int = 0
    empty_answers: int = 0
    invalid_unicode_answers: int = 0
    #: answers that held a credential (stored with ``***`` in its place)
    scrubbed_answers: int = 0
    #: replies whose token usage was impossible (stored without usage)
    invalid_usage: int = 0
    chat_prompts: int = 0
    #: the endpoint refused max_tokens and is sent max_completion_tokens (see complete())
    adapted_max_completion_tokens: bool = False
    completions_prompts: int = 0
    #: log-likelihood requests (a prompt's options scored as continuations)
    choice_prompts: int = 0
    token_counts: int = 0


class OpenAICompatBackend:
    """The :class:`~evalpipe.backends.base.Backend` for OpenAI-compatible endpoints.

    ``prompt.endpoint`` picks ``/chat/completions`` (``Prompt.messages``) or ``/completions``
    (``Prompt.text``). Sent parameters: ``max_tokens``, ``temperature`` (0 → greedy), and
    ``top_p``, ``seed``, ``stop`` only when set.
    """

    def __init__(self, config: OpenAICompatConfig, liveness: Liveness | None = None) -> None:
        self.config = config
        #: whether the endpoint still answers; replicas of one model share one (see its module)
        self.liveness = liveness if liveness is not None else Liveness(config.unreachable_after_s)
        self.model = config.model
        #: the URL as shown in messages, logs, config.json and samples: without user-info or query
        self.shown_url = redact_url(config.base_url.rstrip("/"))
        self._credentials = Credentials(os.environ.get(config.api_key_env), config.base_url)
        self._client = EndpointClient(config.base_url, self._credentials, connections=config.concurrency,
                                      timeout_s=config.timeout_s, connect_timeout_s=config.connect_timeout_s,
                                      max_body_bytes=config.max_answer_bytes)
        self._limiter = AIMDLimiter(config.concurrency, decrease_window_s=config.rate_limit_window_s)
        self._retrying = config.retry_policy().retrying(self._before_sleep)
        per_try = config.preflight_timeout_s / _PROBE_TRIES
        self._probe_retrying = RetryPolicy(_PROBE_TRIES - 1, backoff_base_s=min(0.25, per_try),
                                           backoff_max_s=min(0.25, per_try)).retrying()
        self._probe_timeout = aiohttp.ClientTimeout(total=per_try)
        self._counts = _Counters()
        self._errors: Counter[str] = Counter()
        #: ``system_fingerprint`` of the answers, where the server sends one
        self._fingerprints: Counter[str] = Counter()
        self._paths = {"chat": self._client.url("/chat/completions"), "completions": self._client.url("/completions")}
        #: the endpoint URLs as shown in samples: without user-info or query
        self._urls = {name: redact_url(url).removesuffix(" (credentials removed)") for name, url in self._paths.items()}
        self._models: asyncio.Future[list[dict[str, Any]]] | None = None
        self._tokenizer: asyncio.Future[str | None] | None = None
        self._token_counts: dict[Any, asyncio.Future[int | None]] = {}
        #: "max_tokens", or "max_completion_tokens" once the endpoint asked for it (reasoning models)
        self._completion_tokens_field = "max_tokens"

    # -- Backend protocol ---------------------------------------------------------------------

    async def preflight(self) -> None:
        """Check that the endpoint answers ``GET /models`` and lists ``model``.

        Fails fast: two short tries, so a wrong port stops a run in about a second instead of
        after the full retry schedule.
        """
        served = [str(entry["id"]) for entry in await self.models() if "id" in entry]
        if self.model not in served:
            shown = ", ".join(served[:_MAX_MODELS_LISTED]) or "no models"
            more = f" (and {len(served) - _MAX_MODELS_LISTED} more)" if len(served) > _MAX_MODELS_LISTED else ""
            raise BackendError(f"{self.shown_url} does not serve model {self.model!r}; it serves: {shown}{more}")

    async def complete(self, prompt: Prompt) -> Completion:
        """Send one prompt with retries; a request that fails for good comes back as an error value.

        A 400 that asks for ``max_completion_tokens`` instead of ``max_tokens`` (reasoning models)
        switches this backend to that name for good and the request is sent once more
        (:mod:`evalpipe.backends.wire`); the switch is in :meth:`stats`."""
        if prompt.choices is not None:
            return await self._complete_choices(prompt)
        started = time.perf_counter()
        endpoint = prompt.endpoint
        url, payload = self._request(prompt)
        chat = endpoint == "chat"

        async def attempt() -> Answer:
            data = await self._send(url, payload)
            fingerprint = data.get("system_fingerprint") if isinstance(data, dict) else None
            if isinstance(fingerprint, str) and fingerprint:  # what served it (evalpipe.store.endpoint_identity)
                self._fingerprints[fingerprint] += 1
            try:
                answer = read_answer(data, chat=chat)
                self._counts.invalid_usage += answer.usage_invalid
                return answer
            except RequestFailed as failure:
                self._errors[failure.reason] += 1
                raise

        try:
            try:
                answer, attempts = await call_with_retries(self._retrying, attempt)
            except GaveUp as gave_up:
                if self._completion_tokens_field != "max_tokens" or not asks_for_max_completion_tokens(gave_up.failure):
                    raise
                if not self._counts.adapted_max_completion_tokens:
                    log.warning("%s refuses max_tokens: sending max_completion_tokens from now on", self.shown_url)
                self._completion_tokens_field = "max_completion_tokens"
                self._counts.adapted_max_completion_tokens = True
                url, payload = self._request(prompt, count=False)
                answer, attempts = await call_with_retries(self._retrying, attempt)
        except GaveUp as gave_up:
            return self._failed(gave_up.failure.reason, gave_up.failure.detail, gave_up.attempts, started, endpoint)
        except EndpointGone:  # the one failure that stops the run: the endpoint has gone
            raise
        except Exception as err:  # a bug or a library surprise: one sample fails, the run goes on
            log.warning("unexpected %s from %s", type(err).__name__, self.shown_url)
            return self._failed(f"unexpected {type(err).__name__}", str(err), 1, started, endpoint)
        text = answer.text
        self._counts.successes += 1
        self._counts.retries += attempts - 1
        self._counts.empty_answers += text == ""
        if _SURROGATES.search(text):
            text = _SURROGATES.sub("\ufffd", text)
            self._counts.invalid_unicode_answers += 1
        text = self._scrubbed(text)
        reasoning = _SURROGATES.sub("\ufffd", answer.reasoning) if answer.reasoning else answer.reasoning
        reasoning = self._scrubbed(reasoning) if reasoning else reasoning
        return Completion(
            text=text,
            finish_reason=answer.finish_reason,
            usage=answer.usage,
            latency_s=time.perf_counter() - started,
            attempts=attempts,
            endpoint_url=self._urls[endpoint],
            reasoning=reasoning,
        )

    async def check_choice_scoring(self) -> None:
        """Raise BackendError unless the endpoint returns prompt log-probabilities (one short probe)."""
        probe = Prompt(params=GenerationParams(max_tokens=1), text="The capital of France is", choices=(" Paris",))
        url, payload = self._choices_request(probe)
        try:
            data = await self._probe("POST", url, payload)
            _choice_logprobs(data, probe.text or "", probe.choices or ())
        except GaveUp as gave_up:
            why = gave_up.failure.detail or gave_up.failure.reason
            raise BackendError(f"{self.shown_url} cannot score options by log-likelihood ({why}): it must answer "
                               "/v1/completions with echo and logprobs (vLLM's server does; chat-only APIs and "
                               "llama.cpp's server do not); use --mcqa-scoring generate") from None
        except RequestFailed as failure:
            raise BackendError(f"{self.shown_url} cannot score options by log-likelihood: {failure}; it must return "
                               "prompt log-probabilities from /v1/completions with echo (vLLM's server does; "
                               "chat-only APIs and llama.cpp's server do not); use --mcqa-scoring generate") from None

    async def prompt_logprobs(self, prompt: Prompt) -> Completion:
        """The log-probability of every token of ``prompt.text`` given the tokens before it (one
        ``/completions`` request with ``echo``, ``logprobs`` 1 and the prompt's ``max_tokens``, 1),
        stored as ``{"token_logprobs": [...]}`` — the tokens that start inside the text, the first
        one (no context: the server gives null) left out. Min-K % Prob reads it
        (:mod:`evalpipe.contamination`). Failures are values, as for any request."""
        started = time.perf_counter()
        text = prompt.text or ""
        body: dict[str, Any] = {"model": self.model, **prompt.params.sampling_options(), "prompt": text,
                                "echo": True, "logprobs": 1}
        url, payload = self._paths["completions"], json.dumps(body).encode("ascii")

        async def attempt() -> tuple[list[float], Usage]:
            data = await self._send(url, payload)
            try:
                values = _prompt_token_logprobs(data, text)
            except RequestFailed as failure:
                self._errors[failure.reason] += 1
                raise
            return values, self._checked_usage(data.get("usage"))

        try:
            (values, usage), attempts = await call_with_retries(self._retrying, attempt)
        except GaveUp as gave_up:
            return self._failed(gave_up.failure.reason, gave_up.failure.detail, gave_up.attempts, started,
                                "completions")
        except EndpointGone:  # the one failure that stops the run: the endpoint has gone
            raise
        except Exception as err:  # a bug or a library surprise: one sample fails, the run goes on
            log.warning("unexpected %s from %s", type(err).__name__, self.shown_url)
            return self._failed(f"unexpected {type(err).__name__}", str(err), 1, started, "completions")
        self._counts.successes += 1
        self._counts.retries += attempts - 1
        return Completion(text=json.dumps({"token_logprobs": values}), finish_reason="logprobs", usage=usage,
                          latency_s=time.perf_counter() - started, attempts=attempts,
                          endpoint_url=self._urls["completions"])

    async def check_prompt_logprobs(self) -> None:
        """Raise BackendError unless the endpoint returns prompt log-probabilities (one short probe)."""
        text = "The capital of France is Paris"
        body = {"model": self.model, "prompt": text, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1}
        try:
            _prompt_token_logprobs(await self._probe("POST", self._paths["completions"], json.dumps(body).encode()),
                                   text)
        except GaveUp as gave_up:
            raise BackendError(f"{self.shown_url} returns no prompt log-probabilities "
                               f"({gave_up.failure.detail or gave_up.failure.reason})") from None
        except RequestFailed as failure:
            raise BackendError(f"{self.shown_url} returns no prompt log-probabilities ({failure.detail or failure})") from None

    async def models(self) -> list[dict[str, Any]]:
        """``GET /models``'s entries, fetched once (concurrent callers share the one request)."""
        if self._models is None or _must_ask_again(self._models):
            self._models = asyncio.ensure_future(self._fetch_models())
        return await asyncio.shield(self._models)

    async def context_length(self) -> int | None:
        """``max_model_len`` of the served model in ``GET /models`` (vLLM), else of any entry; None
        when the list has none or cannot be had (budgeting then needs ``--context-length``)."""
        try:
            entries = await self.models()
        except BackendError:
            return None
        ours = [e for e in entries if e.get("id") == self.model]
        for entry in [*ours, *entries]:
            value = entry.get("max_model_len")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    async def count_tokens(self, content: str | Sequence[Message]) -> int | None:
        """Tokens of a text, or of a conversation with the chat template applied (vLLM only);
        None when the server has no tokenizer endpoint or refuses this one.

        Each distinct text or conversation is asked once; concurrent callers share the request.
        """
        if self._tokenizer is None:
            self._tokenizer = asyncio.ensure_future(self._find_tokenizer())
        await asyncio.shield(self._tokenizer)
        key: Any = content if isinstance(content, str) else tuple(content)
        future = self._token_counts.get(key)
        if future is None or _must_ask_again(future):
            future = asyncio.ensure_future(self._count(content))
            self._token_counts[key] = future
        return await asyncio.shield(future)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    def describe(self) -> Mapping[str, Any]:
        """Options for ``config.json``: the API key's environment variable *name*, never its value."""
        options = asdict(self.config)
        options["base_url"] = self.shown_url
        options["backend"] = "openai_compat"
        options["http_client"] = f"aiohttp {aiohttp.__version__}"
        options["endpoints"] = dict(self._urls)
        options["api_key_set"] = self._credentials.key_set
        options.update(route_record(self.config.base_url))  # the proxy used (host only, or None), redirects
        return options

    def stats(self) -> Mapping[str, Any]:
        """Counters for the run summary; ``errors`` counts failed *attempts* by reason."""
        counts = asdict(self._counts)
        counts["errors"] = dict(self._errors)
        if self._fingerprints:
            counts["system_fingerprints"] = dict(self._fingerprints)
        counts["concurrency_max"] = self.config.concurrency
        counts["concurrency_limit"] = self._limiter.limit
        counts["concurrency_limit_min"] = self._limiter.min_reached
        counts["concurrency_decreases"] = self._limiter.decreases
        counts["peak_in_flight"] = self._limiter.peak_in_flight
        return counts

    # -- one request --------------------------------------------------------------------------

    def _request(self, prompt: Prompt, *, count: bool = True) -> tuple[str, bytes]:
        """The URL and JSON body for a prompt (:func:`~evalpipe.backends.wire.request_body`), encoded
        once and reused by every retry.

        ``json.dumps``' ASCII escapes keep any text sendable, even one no UTF-8 could carry.
        """
        body = request_body(self.model, prompt, completion_tokens_field=self._completion_tokens_field)
        if count:
            if prompt.messages is not None:
                self._counts.chat_prompts += 1
            else:
                self._counts.completions_prompts += 1
        return self._paths[prompt.endpoint], json.dumps(body).encode("ascii")

    def _choices_request(self, prompt: Prompt) -> tuple[str, bytes]:
        """One ``/completions`` body for every continuation: echo, logprobs, the prompt as a list."""
        assert prompt.text is not None and prompt.choices is not None
        body: dict[str, Any] = {"model": self.model, **prompt.params.sampling_options(),
                                "prompt": [prompt.text + choice for choice in prompt.choices],
                                "echo": True, "logprobs": 1}
        return self._paths["completions"], json.dumps(body).encode("ascii")

    async def _complete_choices(self, prompt: Prompt) -> Completion:
        """The log-probability of each of ``prompt.choices`` after ``prompt.text`` (see the module
        docstring); failures are values, as for any request."""
        started = time.perf_counter()
        self._counts.choice_prompts += 1
        url, payload = self._choices_request(prompt)
        text, choices = prompt.text or "", prompt.choices or ()

        async def attempt() -> tuple[dict[str, float], dict[str, int], Usage]:
            data = await self._send(url, payload)
            try:
                scores, tokens = _choice_logprobs(data, text, choices)
            except RequestFailed as failure:
                self._errors[failure.reason] += 1
                raise
            return scores, tokens, self._checked_usage(data.get("usage"))

        try:
            (scores, tokens, usage), attempts = await call_with_retries(self._retrying, attempt)
        except GaveUp as gave_up:
            return self._failed(gave_up.failure.reason, gave_up.failure.detail, gave_up.attempts, started,
                                "completions")
        except EndpointGone:
            raise
        except Exception as err:  # a bug or a library surprise: one sample fails, the run goes on
            log.warning("unexpected %s from %s", type(err).__name__, self.shown_url)
            return self._failed(f"unexpected {type(err).__name__}", str(err), 1, started, "completions")
        self._counts.successes += 1
        self._counts.retries += attempts - 1
        return Completion(text=json.dumps({"logprobs": scores, "tokens": tokens}, ensure_ascii=False),
                          finish_reason="logprobs", usage=usage, latency_s=time.perf_counter() - started,
                          attempts=attempts, endpoint_url=self._urls["completions"])

    async def _send(self, url: str, payload: bytes, *, generation: bool = True) -> Any:
        """POST under a limiter slot; feed the limiter and (for generation requests) the counters;
        the decoded JSON reply."""
        self.liveness.check()
        async with self._limiter:
            self._counts.requests_sent += generation
            try:
                raw = await self._client.fetch("POST", url, payload)
            except RequestFailed as failure:
                if failure.reason == "connection error" and failure.status is None:
                    self.liveness.refused(self.shown_url, failure.detail)  # raises EndpointGone when gone
                else:
                    self.liveness.alive()  # an HTTP reply or a timeout: the server is there
                if failure.status == 429 and self._limiter.on_overload():
                    log.info("HTTP 429 from %s: concurrency limit lowered to %d", self.shown_url, self._limiter.limit)
                if generation:
                    self._errors[failure.reason] += 1
                    self._counts.rate_limited += failure.status == 429
                raise
        self._limiter.on_success()
        self.liveness.answered()
        # Refill the slot before using the answer: the release above woke a request waiting for
        # this slot, and it runs in the event loop's next pass. Yielding twice puts this answer's
        # processing (decoding, the caller's storing and scoring) behind *every* request woken by
        # the same wave of answers, so a finished slot is re-sent at once, not after the whole wave
        # was processed (bench/throughput.py: "refill").
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        try:
            return decode_json(raw)
        except RequestFailed as failure:
            if generation:
                self._errors[failure.reason] += 1
            raise

    def _scrubbed(self, text: str) -> str:
        """The answer with every credential form replaced by ``***`` (counted when it held one)."""
        clean = self._credentials.scrub(text)
        self._counts.scrubbed_answers += clean != text
        return clean

    def _checked_usage(self, usage: Any) -> Usage:
        """The reply's token usage, or no usage (counted) when a count is impossible."""
        read = usage_of(usage)
        self._counts.invalid_usage += read is None
        return read or Usage()

    def _before_sleep(self, state: Any) -> None:
        outcome = state.outcome
        failure = outcome.exception() if outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.debug("attempt %d to %s failed (%s); retrying in %.2fs", state.attempt_number, self.shown_url,
                  failure, wait)

    def _failed(self, reason: str, detail: str | None, attempts: int, started: float, endpoint: str) -> Completion:
        self._counts.failures += 1
        self._counts.retries += max(0, attempts - 1)
        plural = "" if attempts == 1 else "s"
        message = f"{reason} after {attempts} attempt{plural}"
        shown = one_line(detail, self._credentials)
        if shown:
            message += f": {shown}"
        message = self._credentials.scrub(message)
        log.info("request to %s failed: %s", self._urls[endpoint], message)
        return Completion(
            text=None,
            latency_s=time.perf_counter() - started,
            attempts=attempts,
            error=message,
            endpoint_url=self._urls[endpoint],
        )

    # -- what the server knows ----------------------------------------------------------------

    async def _probe(self, method: str, url: str, payload: bytes | None = None) -> Any:
        """A short-timeout request with the probe policy (two tries), outside the limiter's
        accounting of generation requests."""

        async def attempt() -> Any:
            return await self._client.request(method, url, payload, timeout=self._probe_timeout)

        data, _ = await call_with_retries(self._probe_retrying, attempt)
        return data

    async def _fetch_models(self) -> list[dict[str, Any]]:
        """``GET /models``; every way it can fail becomes a one-line BackendError."""
        try:
            data = await self._probe("GET", self._client.url("/models"))
        except GaveUp as gave_up:
            raise self._models_error(gave_up.failure) from None
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise BackendError(f"{self.shown_url}/models did not return an OpenAI model list; {_NOT_OPENAI_HINT}")
        return [item for item in items if isinstance(item, dict)]

    def _models_error(self, failure: RequestFailed) -> BackendError:
        status, env = failure.status, self.config.api_key_env
        if status in (401, 403):
            if not self._credentials.key_set:
                return BackendError(f"{self.shown_url} refused the request (HTTP {status}) and environment "
                                    f"variable {env} is not set; export the API key as {env}")
            return BackendError(f"{self.shown_url} rejected the API key from environment variable {env} "
                                f"(HTTP {status})")
        if status == 404:
            return BackendError(f"GET {self.shown_url}/models returned HTTP 404; is the base URL right? "
                                "OpenAI-compatible servers usually serve under .../v1")
        if status is not None:
            detail = f": {failure.detail}" if failure.detail else ""
            return BackendError(f"GET {self.shown_url}/models returned HTTP {status}{detail}")
        if failure.reason == "malformed JSON response":
            return BackendError(f"{self.shown_url}/models did not return JSON; {_NOT_OPENAI_HINT}")
        why = failure.detail or failure.reason
        return BackendError(f"cannot reach {self.shown_url} ({why}); is the server running?")

    async def _find_tokenizer(self) -> str | None:
        """Which tokenizer endpoint the server has (tried once, with a one-word text), or None.
        The probe's own count is remembered like any other."""
        for flavour, path in _TOKENIZERS:
            try:
                data = await self._probe("POST", self._client.url(path, root=True),
                                         _tokenize_payload(flavour, self.model, _PROBE_TEXT))
            except GaveUp:
                continue
            count = data.get("count") if isinstance(data, dict) else None
            if isinstance(count, int) and _PROBE_TEXT not in self._token_counts:
                known: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
                known.set_result(count)
                self._token_counts[_PROBE_TEXT] = known
            return flavour
        return None

    async def _count(self, content: str | Sequence[Message]) -> int | None:
        assert self._tokenizer is not None
        flavour = self._tokenizer.result()
        if flavour is None or (flavour != "vllm" and not isinstance(content, str)):
            return None  # llama.cpp's endpoint counts plain text only
        url = self._client.url(dict(_TOKENIZERS)[flavour], root=True)
        payload = _tokenize_payload(flavour, self.model, content)
        try:  # the one retry policy; a refusal (a text longer than the context, no template) is final
            data, _ = await call_with_retries(self._retrying, lambda: self._send(url, payload, generation=False))
        except GaveUp:
            return None
        self._counts.token_counts += 1
        count = data.get("count") if isinstance(data, dict) else None
        return count if isinstance(count, int) and not isinstance(count, bool) else None


def _must_ask_again(future: asyncio.Future[Any]) -> bool:
    """A remembered request that must be asked again: it failed or was cancelled."""
    return future.done() and (future.cancelled() or future.exception() is not None)


def _tokenize_payload(flavour: str, model: str, content: str | Sequence[Message]) -> bytes:
    """The body of a count request: vLLM's ``/tokenize`` (text without special tokens, or messages
    with the generation prompt, as a chat request is templated) or llama.cpp's ``{"input": text}``."""
    if flavour == "llamacpp":
        body: dict[str, Any] = {"input": content}
    elif isinstance(content, str):
        body = {"model": model, "prompt": content, "add_special_tokens": False}
    else:
        body = {"model": model, "messages": chat_payload(content), "add_generation_prompt": True}
    return json.dumps(body).encode("ascii")


def _choice_logprobs(data: Any, text: str, choices: Sequence[str]) -> tuple[dict[str, float], dict[str, int]]:
    """Each continuation's summed log-probability (and token count) from an echo + logprobs reply to
    the prompts ``text + choice`` (see the module docstring). A reply without prompt log-probabilities
    is a failure that another attempt cannot mend; a malformed one may be retried."""
    try:
        rows = sorted(data["choices"], key=lambda c: c.get("index", 0))
    except (KeyError, TypeError, AttributeError):
        raise RequestFailed("unexpected response shape", retryable=True) from None
    if len(rows) != len(choices):
        raise RequestFailed("unexpected response shape", retryable=True,
                            detail=f"{len(rows)} choices for {len(choices)} prompts")
    scores: dict[str, float] = {}
    tokens: dict[str, int] = {}
    start = len(text)
    for row, choice in zip(rows, choices):
        logprobs = row.get("logprobs") if isinstance(row, dict) else None
        offsets = logprobs.get("text_offset") if isinstance(logprobs, dict) else None
        values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
        if not isinstance(offsets, list) or not isinstance(values, list) or len(offsets) != len(values):
            raise RequestFailed("no prompt log-probabilities", retryable=False,
                                detail="the reply has no logprobs.text_offset/token_logprobs for the echoed prompt")
        end = start + len(choice)
        picked = [v for o, v in zip(offsets, values) if isinstance(o, int) and start <= o < end]
        if not picked or any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in picked):
            raise RequestFailed("no prompt log-probabilities", retryable=False,
                                detail=f"no token of the continuation {choice!r} starts after the prompt (is it "
                                "merged into the prompt's last token?)")
        scores[choice] = float(sum(picked))
        tokens[choice] = len(picked)
    return scores, tokens


def _prompt_token_logprobs(data: Any, text: str) -> list[float]:
    """The log-probabilities of the echoed tokens of ``text`` (those starting before its end; the
    generated token after it left out), without the first token's null. A reply without them is a
    failure another attempt cannot mend."""
    try:
        logprobs = data["choices"][0].get("logprobs")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise RequestFailed("unexpected response shape", retryable=True) from None
    offsets = logprobs.get("text_offset") if isinstance(logprobs, dict) else None
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(offsets, list) or not isinstance(values, list) or len(offsets) != len(values):
        raise RequestFailed("no prompt log-probabilities", retryable=False,
                            detail="the reply has no logprobs.text_offset/token_logprobs for the echoed prompt")
    picked = [v for o, v in zip(offsets, values) if isinstance(o, int) and o < len(text) and v is not None]
    if not picked or any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in picked):
        raise RequestFailed("no prompt log-probabilities", retryable=False,
                            detail="no log-probability for a token of the echoed prompt")
    return [float(v) for v in picked]

