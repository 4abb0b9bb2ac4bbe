"""OpenAICompatBackend against a real loopback server (tests.support.fake_openai), one behaviour
per test, plus the AIMD limiter on its own.

pytest-asyncio is not a dependency, so each test drives its coroutine with ``asyncio.run``.
Backoffs are configured tiny so the whole file runs in a few seconds.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from evalpipe.backends.base import Backend, BackendError
from evalpipe.backends.limiter import AIMDLimiter
from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig, parse_retry_after
from evalpipe.records import Completion, GenerationParams, Message, Prompt
from tests.support.fake_openai import FakeOpenAIServer, Fault

T = TypeVar("T")
MODEL = "test-model"
KEY_ENV = "EVALPIPE_TEST_OPENAI_KEY"
SENTENCE = "BRCA1 mutations raise the risk of breast cancer."


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy may intercept loopback traffic, and no real key may be picked up."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(models=(MODEL, "other-model")) as srv:
        yield srv


def make_config(url: str, **overrides: Any) -> OpenAICompatConfig:
    """A config with millisecond backoffs so retry tests take no real time."""
    options: dict[str, Any] = dict(
        base_url=url,
        model=MODEL,
        api_key_env=KEY_ENV,
        concurrency=8,
        timeout_s=2.0,
        max_retries=3,
        backoff_base_s=0.005,
        backoff_max_s=0.02,
    )
    options.update(overrides)
    return OpenAICompatConfig(**options)


def chat_prompt(text: str = SENTENCE, **params: Any) -> Prompt:
    gen = GenerationParams(max_tokens=params.pop("max_tokens", 64), **params)
    return Prompt(
        params=gen,
        messages=(Message("system", "Tag diseases."), Message("user", f"Text to process:\n{text}")),
    )


def with_backend(config: OpenAICompatConfig, body: Callable[[OpenAICompatBackend], Awaitable[T]]) -> T:
    """Create the backend inside the loop, run ``body`` and always close it."""

    async def main() -> T:
        backend = OpenAICompatBackend(config)
        try:
            return await body(backend)
        finally:
            await backend.aclose()

    return run(main())


def complete_one(config: OpenAICompatConfig, prompt: Prompt) -> tuple[Completion, OpenAICompatBackend, float]:
    """One complete() call; returns the completion, the (closed) backend and the elapsed seconds."""
    holder: dict[str, Any] = {}

    async def body(backend: OpenAICompatBackend) -> Completion:
        holder["backend"] = backend
        started = time.perf_counter()
        completion = await backend.complete(prompt)
        holder["elapsed"] = time.perf_counter() - started
        return completion

    completion = with_backend(config, body)
    return completion, holder["backend"], holder["elapsed"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------------------------------
# Happy paths


def test_backend_satisfies_protocol(server: FakeOpenAIServer) -> None:
    backend = OpenAICompatBackend(make_config(server.url))
    assert isinstance(backend, Backend)
    assert backend.model == MODEL


def test_chat_happy_path_sends_the_expected_body(server: FakeOpenAIServer) -> None:
    prompt = chat_prompt(max_tokens=77, seed=1234, stop=("\n\n", "</response>"))
    completion, _, _ = complete_one(make_config(server.url), prompt)

    assert completion.ok and completion.error is None
    assert completion.text == f"<response>{SENTENCE}"  # echo answer, cut at the "</response>" stop
    assert completion.finish_reason == "stop"
    assert completion.attempts == 1
    assert completion.latency_s > 0
    assert completion.usage.prompt_tokens and completion.usage.completion_tokens
    assert completion.endpoint_url == f"{server.url}/chat/completions"
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == MODEL
    assert request.body["temperature"] == 0
    assert request.body["max_tokens"] == 77
    assert request.body["seed"] == 1234
    assert request.body["stop"] == ["\n\n", "</response>"]
    assert request.body["messages"] == [
        {"role": "system", "content": "Tag diseases."},
        {"role": "user", "content": f"Text to process:\n{SENTENCE}"},
    ]
    assert "top_p" not in request.body


def test_completions_happy_path(server: FakeOpenAIServer) -> None:
    prompt = Prompt(params=GenerationParams(max_tokens=20, top_p=0.9), text=f"Text to process:\n{SENTENCE}")
    completion, backend, _ = complete_one(make_config(server.url), prompt)

    assert completion.text == f"<response>{SENTENCE}</response>"
    assert completion.endpoint_url == f"{server.url}/completions"
    body = server.last_body
    assert server.requests[0].path == "/v1/completions"
    assert body["prompt"] == f"Text to process:\n{SENTENCE}"
    assert body["top_p"] == 0.9 and body["temperature"] == 0 and body["max_tokens"] == 20
    assert "seed" not in body and "stop" not in body and "messages" not in body
    assert backend.stats()["completions_prompts"] == 1


def test_concurrency_is_really_reached(server: FakeOpenAIServer) -> None:
    """All `concurrency` requests are on the wire at once (pools sized for it), never more."""
    server.latency = 0.3
    config = make_config(server.url, concurrency=24)

    async def body(backend: OpenAICompatBackend) -> list[Completion]:
        return await asyncio.gather(*(backend.complete(chat_prompt(f"sentence {i}")) for i in range(48)))

    started = time.perf_counter()
    completions = with_backend(config, body)
    elapsed = time.perf_counter() - started

    assert all(c.ok for c in completions)
    assert server.max_in_flight == 24
    assert elapsed < 2.0  # two waves of 0.3 s, not 48 sequential ones
    assert {c.text for c in completions} == {f"<response>sentence {i}</response>" for i in range(48)}


# ---------------------------------------------------------------------------------------------
# Retries


def test_429_waits_for_retry_after(server: FakeOpenAIServer) -> None:
    server.plan_faults(["429:retry_after=0.6"])
    completion, backend, elapsed = complete_one(make_config(server.url), chat_prompt())

    assert completion.ok and completion.attempts == 2
    assert elapsed >= 0.6
    assert server.total_requests == 2
    stats = backend.stats()
    assert stats["rate_limited"] == 1 and stats["retries"] == 1


def test_retry_after_is_capped(server: FakeOpenAIServer) -> None:
    server.plan_faults(["429:retry_after=30"])
    completion, _, elapsed = complete_one(make_config(server.url, retry_after_max_s=0.1), chat_prompt())

    assert completion.ok and completion.attempts == 2
    assert elapsed < 2.0


def test_parse_retry_after_seconds_and_http_date() -> None:
    now = time.time()
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    in_ten = email.utils.formatdate(now + 10, usegmt=True)
    assert 8.5 <= (parse_retry_after(in_ten, now=now) or 0) <= 10.0
    assert parse_retry_after(email.utils.formatdate(now - 100, usegmt=True), now=now) == 0.0


def test_repeated_429s_lower_the_concurrency_limit(server: FakeOpenAIServer) -> None:
    server.plan_faults(["429"], count=3)
    config = make_config(server.url, concurrency=16, rate_limit_window_s=0.0)
    completion, backend, _ = complete_one(config, chat_prompt())

    assert completion.ok and completion.attempts == 4
    stats = backend.stats()
    assert stats["rate_limited"] == 3
    assert stats["concurrency_limit_min"] == 2  # 16 -> 8 -> 4 -> 2
    assert stats["concurrency_decreases"] == 3


def test_a_burst_of_429s_halves_the_limit_once_per_window(server: FakeOpenAIServer) -> None:
    server.plan_faults(["429"], count=8)
    config = make_config(server.url, concurrency=16, rate_limit_window_s=60.0)

    async def body(backend: OpenAICompatBackend) -> list[Completion]:
        return await asyncio.gather(*(backend.complete(chat_prompt(f"s{i}")) for i in range(8)))

    holder: dict[str, Any] = {}

    async def capture(backend: OpenAICompatBackend) -> list[Completion]:
        holder["backend"] = backend
        return await body(backend)

    completions = with_backend(config, capture)
    assert all(c.ok for c in completions)
    stats = holder["backend"].stats()
    assert stats["rate_limited"] == 8
    assert stats["concurrency_limit_min"] == 8 and stats["concurrency_decreases"] == 1


def test_500_then_success(server: FakeOpenAIServer) -> None:
    server.plan_faults(["500"])
    completion, backend, _ = complete_one(make_config(server.url), chat_prompt())

    assert completion.ok and completion.attempts == 2
    assert server.total_requests == 2
    assert backend.stats()["errors"] == {"HTTP 500": 1}


@pytest.mark.parametrize("status", [502, 503, 408, 409])
def test_other_transient_statuses_are_retried(server: FakeOpenAIServer, status: int) -> None:
    server.plan_faults([str(status)])
    completion, _, _ = complete_one(make_config(server.url), chat_prompt())
    assert completion.ok and completion.attempts == 2


def test_persistent_500_gives_an_error_completion(server: FakeOpenAIServer) -> None:
    server.plan_faults(["500"], count=50)
    completion, backend, _ = complete_one(make_config(server.url, max_retries=3), chat_prompt())

    assert completion.text is None and not completion.ok
    assert completion.attempts == 4
    assert completion.error is not None and completion.error.startswith("HTTP 500 after 4 attempts")
    assert server.total_requests == 4
    stats = backend.stats()
    assert stats["failures"] == 1 and stats["successes"] == 0 and stats["requests_sent"] == 4


def test_slow_response_past_timeout_is_retried_then_fails(server: FakeOpenAIServer) -> None:
    server.plan_faults(["slow:3"], count=2)
    config = make_config(server.url, timeout_s=0.3, max_retries=1)
    completion, _, elapsed = complete_one(config, chat_prompt())

    assert completion.error is not None and completion.error.startswith("timeout after 2 attempts")
    assert completion.attempts == 2
    assert server.total_requests == 2
    assert 0.6 <= elapsed < 2.5  # two 0.3 s timeouts, not the 3 s the server would take


def test_slow_response_then_success(server: FakeOpenAIServer) -> None:
    server.plan_faults(["slow:3"])
    completion, _, _ = complete_one(make_config(server.url, timeout_s=0.3), chat_prompt())
    assert completion.ok and completion.attempts == 2


def test_malformed_json_is_retried(server: FakeOpenAIServer) -> None:
    server.plan_faults(["malformed_json"])
    completion, backend, _ = complete_one(make_config(server.url), chat_prompt())

    assert completion.ok and completion.attempts == 2
    assert backend.stats()["errors"] == {"malformed JSON response": 1}


@pytest.mark.parametrize("fault", ["drop", "drop_mid"])
def test_dropped_connection_is_retried(server: FakeOpenAIServer, fault: str) -> None:
    server.plan_faults([fault])
    completion, backend, _ = complete_one(make_config(server.url), chat_prompt())

    assert completion.ok and completion.attempts == 2
    assert backend.stats()["errors"] == {"connection error": 1}


@pytest.mark.parametrize("fault", ["empty_content", "null_content"])
def test_empty_content_is_an_empty_answer_not_an_error(server: FakeOpenAIServer, fault: str) -> None:
    server.plan_faults([fault])
    completion, backend, _ = complete_one(make_config(server.url), chat_prompt())

    assert completion.text == "" and completion.error is None
    assert completion.attempts == 1 and server.total_requests == 1
    assert backend.stats()["empty_answers"] == 1


def test_400_is_not_retried(server: FakeOpenAIServer) -> None:
    server.plan_faults(["400"])
    completion, _, _ = complete_one(make_config(server.url), chat_prompt())

    assert completion.text is None
    assert completion.error is not None and completion.error.startswith("HTTP 400 after 1 attempt:")
    assert "injected fault" in completion.error  # the server's own message is kept
    assert completion.attempts == 1
    assert server.total_requests == 1


def test_unknown_model_at_request_time_is_not_retried(server: FakeOpenAIServer) -> None:
    completion, _, _ = complete_one(make_config(server.url, model="nope"), chat_prompt())
    assert completion.error is not None and completion.error.startswith("HTTP 404 after 1 attempt")
    assert server.total_requests == 1


def test_unreachable_server_fails_every_attempt_without_raising() -> None:
    config = make_config(f"http://127.0.0.1:{free_port()}/v1", max_retries=2)
    completion, _, _ = complete_one(config, chat_prompt())
    assert completion.error is not None and completion.error.startswith("connection error after 3 attempts")


# ---------------------------------------------------------------------------------------------
# Preflight


def test_preflight_passes_when_the_model_is_served(server: FakeOpenAIServer) -> None:
    with_backend(make_config(server.url), lambda b: b.preflight())
    assert server.stats()["models_requests"] == 1


def test_preflight_on_a_closed_port_fails_fast_and_clearly() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    started = time.perf_counter()
    with pytest.raises(BackendError) as info:
        with_backend(make_config(url), lambda b: b.preflight())
    assert time.perf_counter() - started < 5.0
    message = str(info.value)
    assert message.startswith(f"cannot reach {url} (")
    assert "is the server running?" in message


def test_preflight_names_the_served_models(server: FakeOpenAIServer) -> None:
    with pytest.raises(BackendError) as info:
        with_backend(make_config(server.url, model="llama-9000"), lambda b: b.preflight())
    message = str(info.value)
    assert server.url in message and "'llama-9000'" in message
    assert f"{MODEL}, other-model" in message


def test_preflight_wrong_base_url_path_hints_at_v1(server: FakeOpenAIServer) -> None:
    with pytest.raises(BackendError, match="/v1"):
        with_backend(make_config(server.url.removesuffix("/v1")), lambda b: b.preflight())


def test_bad_config_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="http"):
        OpenAICompatConfig(base_url="localhost:8000/v1", model=MODEL)
    with pytest.raises(BackendError, match="concurrency"):
        OpenAICompatConfig(base_url="http://x/v1", model=MODEL, concurrency=0)


# ---------------------------------------------------------------------------------------------
# The API key


def test_api_key_comes_from_the_named_env_var(monkeypatch: pytest.MonkeyPatch, server: FakeOpenAIServer) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-from-env")
    complete_one(make_config(server.url), chat_prompt())
    assert server.requests[0].headers["authorization"] == "Bearer sk-test-from-env"


def test_unset_api_key_env_sends_EMPTY(server: FakeOpenAIServer) -> None:
    complete_one(make_config(server.url), chat_prompt())
    assert server.requests[0].headers["authorization"] == "Bearer EMPTY"


def test_secret_never_leaks(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-SECRET-4f9a1c77d2e0b3"
    monkeypatch.setenv(KEY_ENV, secret)
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []

    def key_echoing_fault(request: Any) -> Fault:
        # a careless server that quotes the Authorization header back in its error message
        return Fault("status", 400, message=f"bad request from {request.headers.get('authorization')}")

    with FakeOpenAIServer(models=(MODEL,), api_key="a-different-key") as strict:
        with pytest.raises(BackendError) as info:
            with_backend(make_config(strict.url), lambda b: b.preflight())
        seen.append(str(info.value))
        assert KEY_ENV in str(info.value) and "rejected" in str(info.value)

    with FakeOpenAIServer(models=(MODEL,)) as server:
        server.set_fault_policy(key_echoing_fault)

        async def body(backend: OpenAICompatBackend) -> list[Completion]:
            completions = [await backend.complete(chat_prompt())]
            server.set_fault_policy(None)
            server.plan_faults(["500"], count=10)
            completions.append(await backend.complete(chat_prompt()))
            server.plan_faults(["drop"], count=10)
            completions.append(await backend.complete(chat_prompt()))
            seen.extend([repr(backend), str(backend.describe()), str(backend.stats())])
            return completions

        completions = with_backend(make_config(server.url, max_retries=1), body)
        assert server.requests[0].headers["authorization"] == f"Bearer {secret}"  # it was used

    errors = [c.error or "" for c in completions]
    assert all(errors) and "***" in errors[0]
    seen += errors + [repr(c) for c in completions] + [caplog.text]
    for text in seen:
        assert secret not in text
    assert caplog.records  # the check above looked at real log output


# ---------------------------------------------------------------------------------------------
# describe() and stats()


def test_describe_records_options_but_only_the_key_env_name(server: FakeOpenAIServer) -> None:
    backend = OpenAICompatBackend(make_config(server.url, concurrency=5))
    described = backend.describe()
    assert described["base_url"] == server.url and described["model"] == MODEL
    assert described["api_key_env"] == KEY_ENV and described["api_key_set"] is False
    assert described["concurrency"] == 5 and described["max_retries"] == 3
    assert set(described["endpoints"]) == {"chat", "completions"}
    run(backend.aclose())


def test_stats_count_requests_successes_failures_and_retries(server: FakeOpenAIServer) -> None:
    server.plan_faults(["500", "ok", "400"])

    async def body(backend: OpenAICompatBackend) -> dict[str, Any]:
        await backend.complete(chat_prompt("a"))  # 500, then ok
        await backend.complete(chat_prompt("b"))  # 400: fails
        await backend.complete(chat_prompt("c"))  # ok
        return dict(backend.stats())

    stats = with_backend(make_config(server.url), body)
    assert stats["requests_sent"] == 4
    assert stats["successes"] == 2 and stats["failures"] == 1 and stats["retries"] == 1
    assert stats["errors"] == {"HTTP 500": 1, "HTTP 400": 1}
    assert stats["chat_prompts"] == 3
    assert stats["concurrency_limit"] == 8 and stats["concurrency_limit_min"] == 8


# ---------------------------------------------------------------------------------------------
# AIMDLimiter on its own


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_limiter_caps_holders_at_the_limit() -> None:
    limiter = AIMDLimiter(3)
    current = peak = 0

    async def worker() -> None:
        nonlocal current, peak
        async with limiter:
            current += 1
            peak = max(peak, current)
            await asyncio.sleep(0.01)
            current -= 1

    async def main() -> None:
        await asyncio.gather(*(worker() for _ in range(12)))

    run(main())
    assert peak == 3 and limiter.in_flight == 0 and limiter.peak_in_flight == 3


def test_limiter_halves_on_overload_once_per_window_and_not_below_min() -> None:
    clock = FakeClock()
    limiter = AIMDLimiter(64, min_limit=2, decrease_window_s=1.0, clock=clock)
    assert limiter.on_overload() and limiter.limit == 32
    assert not limiter.on_overload() and limiter.limit == 32  # same window: a burst counts once
    for expected in (16, 8, 4, 2, 2):
        clock.now += 1.0
        limiter.on_overload()
        assert limiter.limit == expected
    assert limiter.min_reached == 2 and limiter.decreases == 5


def test_limiter_grows_back_additively_up_to_the_max() -> None:
    limiter = AIMDLimiter(6, initial=2)
    for _ in range(2):
        limiter.on_success()
    assert limiter.limit == 3  # +1 after `limit` successes
    for _ in range(3 + 4 + 5 + 50):
        limiter.on_success()
    assert limiter.limit == 6


def test_lowered_limit_holds_back_new_holders_until_enough_leave() -> None:
    async def main() -> list[int]:
        limiter = AIMDLimiter(4, decrease_window_s=0.0)
        for _ in range(4):
            await limiter.acquire()
        limiter.on_overload()  # limit 2 with 4 holders
        entered: list[int] = []

        async def late(i: int) -> None:
            async with limiter:
                entered.append(i)

        task = asyncio.ensure_future(late(1))
        await asyncio.sleep(0.01)
        assert entered == []
        limiter.release()  # 3 holders: still over the limit of 2
        limiter.release()  # 2 holders: at the limit, still no room
        await asyncio.sleep(0.01)
        assert entered == []
        limiter.release()  # 1 holder: room for one
        await asyncio.wait_for(task, 1.0)
        return entered

    assert run(main()) == [1]


def test_limiter_cancelled_waiter_does_not_leak_capacity() -> None:
    async def main() -> AIMDLimiter:
        limiter = AIMDLimiter(1)
        await limiter.acquire()
        waiter = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        limiter.release()
        await asyncio.wait_for(limiter.acquire(), 1.0)  # would hang if the slot had leaked
        limiter.release()
        return limiter

    limiter = run(main())
    assert limiter.in_flight == 0


def test_limiter_serves_waiters_in_arrival_order() -> None:
    async def main() -> list[int]:
        limiter = AIMDLimiter(1)
        order: list[int] = []
        await limiter.acquire()

        async def waiter(i: int) -> None:
            async with limiter:
                order.append(i)

        tasks = [asyncio.ensure_future(waiter(i)) for i in range(5)]
        await asyncio.sleep(0)
        limiter.release()
        await asyncio.gather(*tasks)
        return order

    assert run(main()) == [0, 1, 2, 3, 4]


def test_limiter_rejects_bad_bounds() -> None:
    with pytest.raises(ValueError):
        AIMDLimiter(0)
    with pytest.raises(ValueError):
        AIMDLimiter(4, min_limit=5)
    with pytest.raises(RuntimeError):
        AIMDLimiter(2).release()


def test_urls_with_credentials_are_shown_redacted_everywhere_the_backend_shows_them():
    """describe() (config.json), endpoint names (samples) and the embedder's record never carry
    user-info or query strings; the redaction happens in the backend, at the source."""
    from evalpipe.backends.embeddings import HTTPEmbeddingsConfig, OpenAIEmbeddings

    url = "http://user:s3cret-pw@127.0.0.1:9/v1?api-key=s3cret-q"
    backend = OpenAICompatBackend(OpenAICompatConfig(base_url=url, model="m"))
    shown = repr(backend.describe()) + repr(backend._urls) + repr(backend)
    embedder = OpenAIEmbeddings(HTTPEmbeddingsConfig(base_url=url, model="e"))
    shown += repr(embedder.describe())
    assert "s3cret" not in shown and "127.0.0.1:9/v1" in shown
    asyncio.run(backend.aclose())
    asyncio.run(embedder.aclose())


# ---------------------------------------------------------------------------------------------
# The HTTP path: keep-alive, framing, hostile answers


def test_connections_are_kept_alive_and_reused(server: FakeOpenAIServer) -> None:
    """60 requests at concurrency 8 travel on at most 8 connections (plus none for retries)."""

    async def body(backend: OpenAICompatBackend) -> list[Completion]:
        return await asyncio.gather(*(backend.complete(chat_prompt(f"s{i}")) for i in range(60)))

    completions = with_backend(make_config(server.url, concurrency=8), body)
    assert all(c.ok for c in completions)
    assert 1 <= server.connections <= 8


def test_chunked_answer_is_read_whole(server: FakeOpenAIServer) -> None:
    server.plan_faults(["chunked"])
    completion, _, _ = complete_one(make_config(server.url), chat_prompt())
    assert completion.ok and completion.attempts == 1 and completion.text == f"<response>{SENTENCE}</response>"


def test_a_200_that_is_no_completion_is_retried(server: FakeOpenAIServer) -> None:
    server.plan_faults(["wrong_shape"])
    completion, backend, _ = complete_one(make_config(server.url), chat_prompt())
    assert completion.ok and completion.attempts == 2
    assert backend.stats()["errors"] == {"unexpected response shape": 1}


def test_a_lone_surrogate_in_an_answer_becomes_a_replacement_character(server: FakeOpenAIServer) -> None:
    """Valid JSON ("\\udcff") that no UTF-8 file can hold: the answer is kept, storable, and counted."""
    server.plan_faults(["lone_surrogate"])
    completion, backend, _ = complete_one(make_config(server.url), chat_prompt())
    assert completion.ok and completion.text == "<response>broken \ufffd answer</response>"
    completion.text.encode("utf-8")  # would raise UnicodeEncodeError with the surrogate
    assert backend.stats()["invalid_unicode_answers"] == 1


def test_retry_after_as_an_http_date_is_honoured(server: FakeOpenAIServer) -> None:
    server.plan_faults(["429:retry_after_date=2"])
    completion, _, elapsed = complete_one(make_config(server.url), chat_prompt())
    # an HTTP-date has whole seconds: 2 s from now is between 1 and 2 s away
    assert completion.ok and completion.attempts == 2 and elapsed >= 0.9


def test_first_attempt_is_inside_the_policy_with_no_retries(server: FakeOpenAIServer) -> None:
    server.plan_faults(["503"], count=3)
    completion, backend, _ = complete_one(make_config(server.url, max_retries=0), chat_prompt())
    assert completion.error is not None and completion.error.startswith("HTTP 503 after 1 attempt")
    assert server.total_requests == 1 and backend.stats()["retries"] == 0


# ---------------------------------------------------------------------------------------------
# What the server knows: models, context length, token counts


def test_models_are_asked_once_for_preflight_and_context_length() -> None:
    with FakeOpenAIServer(models=(MODEL, "other-model"), max_model_len=4096) as srv:

        async def body(backend: OpenAICompatBackend) -> tuple[int | None, list[Any]]:
            lengths = await asyncio.gather(*(backend.context_length() for _ in range(5)))
            await backend.preflight()
            assert set(lengths) == {4096}
            return lengths[0], await backend.models()

        context, models = with_backend(make_config(srv.url), body)
        assert context == 4096 and [m["id"] for m in models] == [MODEL, "other-model"]
        assert srv.stats()["models_requests"] == 1


def test_context_length_is_none_without_max_model_len_or_server(server: FakeOpenAIServer) -> None:
    assert with_backend(make_config(server.url), lambda b: b.context_length()) is None
    assert with_backend(make_config(f"http://127.0.0.1:{free_port()}/v1"), lambda b: b.context_length()) is None


def test_count_tokens_concurrently_each_text_once() -> None:
    texts = [f"word {'x ' * i}" for i in range(10)]
    with FakeOpenAIServer(models=(MODEL,), tokenize=True) as srv:

        async def body(backend: OpenAICompatBackend) -> list[int | None]:
            return await asyncio.gather(*(backend.count_tokens(t) for t in texts * 5))

        counts = with_backend(make_config(srv.url), body)
        assert counts == [len(t.split()) for t in texts] * 5
        assert srv.stats()["tokenize_requests"] == 1 + 10  # the tokenizer probe, then each text once
        assert srv.max_in_flight == 0  # counts are no generation requests


def test_count_tokens_of_messages_and_without_a_tokenizer(server: FakeOpenAIServer) -> None:
    messages = (Message("system", "be brief"), Message("user", "hello there doctor"))
    with FakeOpenAIServer(models=(MODEL,), tokenize=True) as srv:
        assert with_backend(make_config(srv.url), lambda b: b.count_tokens(messages)) == 3 + 4 + 1
    assert with_backend(make_config(server.url), lambda b: b.count_tokens("no tokenizer here")) is None
    with FakeOpenAIServer(models=(MODEL,), tokenize="llamacpp") as srv:
        assert with_backend(make_config(srv.url), lambda b: b.count_tokens("three words here")) == 3
        assert with_backend(make_config(srv.url), lambda b: b.count_tokens(messages)) is None


# ---------------------------------------------------------------------------------------------
# Embeddings: the same HTTP path and retry policy


def test_embeddings_are_retried_by_the_same_policy(server: FakeOpenAIServer) -> None:
    from evalpipe.backends.embeddings import HTTPEmbeddingsConfig, OpenAIEmbeddings
    from tests.support.fake_openai import fake_vector

    server.plan_faults(["429:retry_after=0.3", "500", "drop"])

    async def main() -> tuple[Any, int]:
        embedder = OpenAIEmbeddings(HTTPEmbeddingsConfig(base_url=server.url, model=MODEL, api_key_env=KEY_ENV,
                                                         batch_size=2, max_retries=3, backoff_base_s=0.005,
                                                         backoff_max_s=0.02))
        try:
            return await embedder.embed(["a", "bb", "ccc"]), embedder.requests
        finally:
            await embedder.aclose()

    started = time.perf_counter()
    vectors, requests = run(main())
    assert vectors.tolist() == [fake_vector(t) for t in ["a", "bb", "ccc"]]
    assert requests == 2 + 3 and server.total_requests == 5
    assert time.perf_counter() - started >= 0.3  # the Retry-After was waited out


def test_embeddings_failure_is_one_scrubbed_line(monkeypatch: pytest.MonkeyPatch, server: FakeOpenAIServer) -> None:
    from evalpipe.backends.embeddings import HTTPEmbeddingsConfig, OpenAIEmbeddings

    monkeypatch.setenv(KEY_ENV, "sk-embed-secret-77")
    server.plan_faults(["echo_auth"])
    embedder = OpenAIEmbeddings(HTTPEmbeddingsConfig(base_url=server.url, model=MODEL, api_key_env=KEY_ENV))

    async def main() -> Any:
        try:
            return await embedder.embed(["x"])
        finally:
            await embedder.aclose()

    with pytest.raises(BackendError) as info:
        run(main())
    message = str(info.value)
    assert "HTTP 401 after 1 attempt" in message and "\n" not in message
    assert "sk-embed-secret-77" not in message and "***" in message
