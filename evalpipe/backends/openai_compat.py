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
* **Adaptive concurrency** (:class:`~evalpipe.backends.limiter.AIMDLimiter`): at most ``concurrency``
  requests in flight, halved on 429s; a slot is held only while a request is on the wire.
* **What the server knows, asked once** (read by :mod:`evalpipe.backends.server_facts`): ``GET /models``
  once for :meth:`preflight` and :meth:`context_length`; :meth:`count_tokens` asks the server's
  tokenizer endpoint (vLLM's or llama.cpp's), each distinct text once.
* **Log-likelihood of options** and of a prompt's own tokens: ``echo`` + ``logprobs`` requests, read
  by :mod:`evalpipe.backends.echo_logprobs` (what a reply means, and what a server without them says).
* **Credentials are never shown or stored.** The config holds only the key's environment variable's
  *name*; every error text *and every answer* (a server, or a prompted model, may echo a secret in a
  200 reply) passes :meth:`Credentials.scrub`: such an answer is stored with ``***`` and counted
  (``scrubbed_answers``). Judges' replies come through this backend too.
* **Replies are bounded and checked**: a body over ``max_answer_bytes`` fails (``answer too large``)
  unread (:mod:`evalpipe.backends.client`); impossible token usage (``NaN``, negative, a string) is
  dropped and counted (``invalid_usage``).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import aiohttp

from evalpipe.backends.base import BackendError, Credentials
from evalpipe.backends.client import EndpointClient, decode_json, one_line
from evalpipe.backends.limiter import AIMDLimiter
from evalpipe.backends.liveness import EndpointGone, Liveness
from evalpipe.backends.retry import GaveUp, RequestFailed, RetryPolicy, call_with_retries, parse_retry_after
from evalpipe.backends.echo_logprobs import choice_logprobs, prompt_token_logprobs
from evalpipe.backends.openai_config import OpenAICompatConfig
from evalpipe.backends.request_counts import RequestCounts
from evalpipe.backends.server_facts import (
    PROBE_TEXT, TOKENIZERS, check_served, context_length_of, model_list, models_error, must_ask_again,
    token_count_of,
)
from evalpipe.backends.wire import (
    Answer, asks_for_max_completion_tokens, read_answer, request_body, tokenize_payload, usage_of,
)
from evalpipe.endpoints import redact_url, route_record
from evalpipe.records import Completion, GenerationParams, Message, Prompt, Usage

__all__ = ["OpenAICompatBackend", "OpenAICompatConfig", "parse_retry_after"]

log = logging.getLogger(__name__)

#: tries for the model list and the tokenizer probe: a wrong port should stop a run in a second
_PROBE_TRIES = 2
_SURROGATES = re.compile("[\ud800-\udfff]")


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
        self._counts = RequestCounts()
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
        check_served(await self.models(), self.model, self.shown_url)

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
            choice_logprobs(data, probe.text or "", probe.choices or ())
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
        return await self._echoed(url, payload, lambda data: {"token_logprobs": prompt_token_logprobs(data, text)},
                                  started)

    async def check_prompt_logprobs(self) -> None:
        """Raise BackendError unless the endpoint returns prompt log-probabilities (one short probe)."""
        text = "The capital of France is Paris"
        body = {"model": self.model, "prompt": text, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1}
        try:
            prompt_token_logprobs(await self._probe("POST", self._paths["completions"], json.dumps(body).encode()),
                                   text)
        except GaveUp as gave_up:
            raise BackendError(f"{self.shown_url} returns no prompt log-probabilities "
                               f"({gave_up.failure.detail or gave_up.failure.reason})") from None
        except RequestFailed as failure:
            raise BackendError(f"{self.shown_url} returns no prompt log-probabilities ({failure.detail or failure})") from None

    async def models(self) -> list[dict[str, Any]]:
        """``GET /models``'s entries, fetched once (concurrent callers share the one request)."""
        if self._models is None or must_ask_again(self._models):
            self._models = asyncio.ensure_future(self._fetch_models())
        return await asyncio.shield(self._models)

    async def context_length(self) -> int | None:
        """``max_model_len`` of the served model in ``GET /models`` (vLLM), else of any entry; None
        when the list has none or cannot be had (budgeting then needs ``--context-length``)."""
        try:
            entries = await self.models()
        except BackendError:
            return None
        return context_length_of(entries, self.model)

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
        if future is None or must_ask_again(future):
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

        def read(data: Any) -> dict[str, Any]:
            scores, tokens = choice_logprobs(data, text, choices)
            return {"logprobs": scores, "tokens": tokens}

        return await self._echoed(url, payload, read, started)

    async def _echoed(self, url: str, payload: bytes, read: Callable[[Any], dict[str, Any]],
                      started: float) -> Completion:
        """One ``/completions`` echo + logprobs request, its reply turned by ``read`` into the JSON
        stored as the answer (:mod:`evalpipe.backends.echo_logprobs`); failures are values."""

        async def attempt() -> tuple[dict[str, Any], Usage]:
            data = await self._send(url, payload)
            try:
                value = read(data)
            except RequestFailed as failure:
                self._errors[failure.reason] += 1
                raise
            return value, self._checked_usage(data.get("usage"))

        try:
            (value, usage), attempts = await call_with_retries(self._retrying, attempt)
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
        return Completion(text=json.dumps(value, ensure_ascii=False), finish_reason="logprobs", usage=usage,
                          latency_s=time.perf_counter() - started, attempts=attempts,
                          endpoint_url=self._urls["completions"])

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
            raise models_error(gave_up.failure, self.shown_url, self.config.api_key_env,
                               self._credentials.key_set) from None
        return model_list(data, self.shown_url)

    async def _find_tokenizer(self) -> str | None:
        """Which tokenizer endpoint the server has (tried once, with a one-word text), or None.
        The probe's own count is remembered like any other."""
        for flavour, path in TOKENIZERS:
            try:
                data = await self._probe("POST", self._client.url(path, root=True),
                                         tokenize_payload(flavour, self.model, PROBE_TEXT))
            except GaveUp:
                continue
            count = data.get("count") if isinstance(data, dict) else None
            if isinstance(count, int) and PROBE_TEXT not in self._token_counts:
                known: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
                known.set_result(count)
                self._token_counts[PROBE_TEXT] = known
            return flavour
        return None

    async def _count(self, content: str | Sequence[Message]) -> int | None:
        assert self._tokenizer is not None
        flavour = self._tokenizer.result()
        if flavour is None or (flavour != "vllm" and not isinstance(content, str)):
            return None  # llama.cpp's endpoint counts plain text only
        url = self._client.url(dict(TOKENIZERS)[flavour], root=True)
        payload = tokenize_payload(flavour, self.model, content)
        try:  # the one retry policy; a refusal (a text longer than the context, no template) is final
            data, _ = await call_with_retries(self._retrying, lambda: self._send(url, payload, generation=False))
        except GaveUp:
            return None
        self._counts.token_counts += 1
        return token_count_of(data)
