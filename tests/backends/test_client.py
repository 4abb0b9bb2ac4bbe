"""The one HTTP path (evalpipe.backends.client, aiohttp) and the one retry policy
(evalpipe.backends.retry, tenacity), each on its own: TLS, proxies from the environment, where
credentials travel, how failures are classified, how long the policy waits."""

from __future__ import annotations

import asyncio
import base64
import email.utils
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from tenacity import RetryCallState

from evalpipe.backends.base import Credentials
from evalpipe.backends.client import EndpointClient, strip_userinfo
from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
from evalpipe.backends.retry import GaveUp, RequestFailed, RetryPolicy, call_with_retries, parse_retry_after
from evalpipe.records import GenerationParams, Prompt
from tests.support.fake_openai import FakeOpenAIServer


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "NO_PROXY",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)


@asynccontextmanager
async def raw_server(handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
                     ) -> AsyncIterator[int]:
    """A bare TCP server (no HTTP library) so a test sees exactly the bytes a client sends."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def client(url: str, credentials: Credentials | None = None, timeout_s: float = 2.0) -> EndpointClient:
    return EndpointClient(url, credentials or Credentials(None), connections=4, timeout_s=timeout_s,
                          connect_timeout_s=timeout_s)


def test_https_base_url_speaks_tls() -> None:
    """An https:// endpoint gets a TLS ClientHello (record type 0x16), never plain HTTP."""
    first_bytes: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first_bytes.append(await reader.read(5))
        writer.close()

    async def main() -> str | None:
        async with raw_server(handler) as port:
            config = OpenAICompatConfig(base_url=f"https://127.0.0.1:{port}/v1", model="m", max_retries=0,
                                        timeout_s=2.0)
            backend = OpenAICompatBackend(config)
            try:
                completion = await backend.complete(Prompt(params=GenerationParams(max_tokens=4), text="hi"))
            finally:
                await backend.aclose()
            return completion.error

    error = asyncio.run(main())
    assert error is not None and error.startswith("connection error after 1 attempt")
    assert first_bytes and first_bytes[0][:1] == b"\x16"


def test_http_proxy_from_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    proxied: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        proxied.append(head.split(b"\r\n", 1)[0])
        body = b'{"via": "proxy"}'
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))
        await writer.drain()
        writer.close()

    async def main() -> Any:
        async with raw_server(proxy) as port:
            monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
            target = client("http://10.255.255.1:9/v1")  # never reached directly
            try:
                return await target.request("GET", target.url("/models"))
            finally:
                await target.aclose()

    assert asyncio.run(main()) == {"via": "proxy"}
    assert proxied == [b"GET http://10.255.255.1:9/v1/models HTTP/1.1"]


def test_url_user_info_travels_as_basic_auth_not_in_the_url() -> None:
    url = "http://alice:p%40ss%2Fw0rd!@127.0.0.1:{port}/v1"
    with FakeOpenAIServer(models=("m",)) as server:
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=url.format(port=server.port), model="m"))

        async def main() -> Any:
            try:
                return await backend.complete(Prompt(params=GenerationParams(max_tokens=4), text="x"))
            finally:
                await backend.aclose()

        assert asyncio.run(main()).ok
        [request] = server.requests
    expected = base64.b64encode(b"alice:p@ss/w0rd!").decode()
    assert request.headers["authorization"] == f"Basic {expected}"
    assert strip_userinfo(url.format(port=8000)) == "http://127.0.0.1:8000/v1"


def test_credentials_scrub_every_form() -> None:
    credentials = Credentials("sk-live-abcdef123456", "http://alice:p%40ss%2Fw0rd!@host:8000/v1?api-key=q-secret-99")
    basic = base64.b64encode(b"alice:p@ss/w0rd!").decode()
    text = (f"Bearer sk-live-abcdef123456 | sk-live-abcdef123456 | Basic {basic} | {basic} | alice:p@ss/w0rd! "
            f"| alice:p%40ss%2Fw0rd! | p@ss/w0rd! | {basic.replace('/', chr(92) + '/')} | q-secret-99")
    scrubbed = credentials.scrub(text)
    for secret in ("sk-live-abcdef123456", basic, "p@ss/w0rd!", "p%40ss%2Fw0rd!", "q-secret-99"):
        assert secret not in scrubbed
    assert credentials.authorization == f"Basic {basic}"
    assert "sk-live" not in repr(credentials) and "sk-live" not in str(credentials)
    # placeholders are never "scrubbed" out of ordinary text
    assert Credentials(None).scrub("EMPTY Bearer EMPTY") == "EMPTY Bearer EMPTY"


def test_an_empty_user_name_in_the_url_is_no_basic_credential() -> None:
    """``http://@host`` has user-info with an empty user: no Basic header (it used to crash building
    the scrubbed forms, found by mypy); the key is still sent and scrubbed, the password too."""
    credentials = Credentials("sk-live-abcdef123456", "http://:pw-secret-42@127.0.0.1:8000/v1")
    assert credentials.authorization == "Bearer sk-live-abcdef123456"
    assert credentials.scrub("key sk-live-abcdef123456, password pw-secret-42") == "key ***, password ***"
    assert Credentials(None, "http://@127.0.0.1:8000/v1").authorization == "Bearer EMPTY"


@pytest.mark.parametrize(("fault", "reason", "retryable"), [
    ("500", "HTTP 500", True), ("429", "HTTP 429", True), ("408", "HTTP 408", True), ("400", "HTTP 400", False),
    ("404", "HTTP 404", False), ("malformed_json", "malformed JSON response", True),
    ("drop", "connection error", True), ("drop_mid", "connection error", True), ("slow:3", "timeout", True),
])
def test_failures_are_classified(fault: str, reason: str, retryable: bool) -> None:
    with FakeOpenAIServer(models=("m",)) as server:
        server.plan_faults([fault])
        target = client(server.url, timeout_s=0.5)

        async def main() -> RequestFailed:
            try:
                with pytest.raises(RequestFailed) as info:
                    await target.request("POST", target.url("/completions"), b'{"model": "m", "prompt": "x"}')
                return info.value
            finally:
                await target.aclose()

        failure = asyncio.run(main())
    assert failure.reason == reason and failure.retryable is retryable


def test_a_refused_connection_names_the_socket_error() -> None:
    target = client("http://127.0.0.1:9/v1")

    async def main() -> RequestFailed:
        try:
            with pytest.raises(RequestFailed) as info:
                await target.request("GET", target.url("/models"))
            return info.value
        finally:
            await target.aclose()

    failure = asyncio.run(main())
    assert failure.reason == "connection error" and "refused" in (failure.detail or "").lower()


# ---------------------------------------------------------------------------------------------
# The retry policy


def test_parse_retry_after() -> None:
    now = time.time()
    assert parse_retry_after("2") == 2.0 and parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None and parse_retry_after("nan") is None
    assert 8.5 <= (parse_retry_after(email.utils.formatdate(now + 10, usegmt=True), now=now) or 0) <= 10.0
    assert parse_retry_after(email.utils.formatdate(now - 100, usegmt=True), now=now) == 0.0


def _waits(policy: RetryPolicy, failure: RequestFailed, retries: int) -> list[float]:
    """The waits the policy chooses before retries 1..n of ``failure``."""
    controller = policy.retrying()
    waits = []
    for attempt in range(1, retries + 1):
        state = RetryCallState(controller, fn=None, args=(), kwargs={})
        state.attempt_number = attempt
        state.set_exception((RequestFailed, failure, None))
        waits.append(controller.wait(state))
    return waits


def test_backoff_is_jittered_exponential_and_capped() -> None:
    policy = RetryPolicy(max_retries=6, backoff_base_s=1.0, backoff_max_s=5.0)
    for _ in range(20):
        waits = _waits(policy, RequestFailed("HTTP 500", retryable=True), 4)
        assert 1.0 <= waits[0] <= 2.0 and 2.0 <= waits[1] <= 3.0 and 4.0 <= waits[2] <= 5.0 and waits[3] == 5.0


def test_retry_after_overrides_the_backoff_and_is_capped() -> None:
    policy = RetryPolicy(max_retries=3, backoff_base_s=0.5, retry_after_max_s=10.0)
    [wait] = _waits(policy, RequestFailed("HTTP 429", retryable=True, retry_after_s=7.0), 1)
    assert 7.0 <= wait <= 7.5
    [wait] = _waits(policy, RequestFailed("HTTP 429", retryable=True, retry_after_s=600.0), 1)
    assert 10.0 <= wait <= 10.5


def test_policy_counts_every_attempt_and_stops_on_a_final_failure() -> None:
    policy = RetryPolicy(max_retries=4, backoff_base_s=0.0, backoff_max_s=0.0)
    outcomes: list[Any] = [RequestFailed("HTTP 500", retryable=True), RequestFailed("timeout", retryable=True), "ok"]

    async def attempt() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert asyncio.run(call_with_retries(policy.retrying(), attempt)) == ("ok", 3)

    async def bad_request() -> str:
        raise RequestFailed("HTTP 400", retryable=False)

    with pytest.raises(GaveUp) as info:
        asyncio.run(call_with_retries(policy.retrying(), bad_request))
    assert info.value.attempts == 1 and info.value.failure.reason == "HTTP 400"

    async def always_500() -> str:
        raise RequestFailed("HTTP 500", retryable=True)

    with pytest.raises(GaveUp) as info:
        asyncio.run(call_with_retries(policy.retrying(), always_500))
    assert info.value.attempts == 5


def test_evalpipe_has_no_http_protocol_code_and_no_sdk() -> None:
    """One HTTP path: no module of evalpipe imports the standard library's HTTP clients, the openai
    SDK or httpx (the loopback test server, a test tool, may use what it likes) — except the Batch
    API client, the one place the openai SDK is used, lazily (issue 25; docs/architecture.md)."""
    import re
    from pathlib import Path

    import evalpipe

    banned = re.compile(r"^\s*(import|from)\s+(urllib\.request|urllib\.error|http\.client|http\.server|openai|httpx\w*)\b",
                        re.MULTILINE)
    root = Path(evalpipe.__file__).parent
    offenders = [str(path) for path in root.rglob("*.py") if banned.search(path.read_text())]
    assert offenders == [str(root / "backends" / "batch.py")]
    batch = (root / "backends" / "batch.py").read_text()
    found = {m.group(2) for m in banned.finditer(batch)}
    assert found == {"openai"}  # the SDK, and no other HTTP client
    assert not re.search(r"^(import|from)\s+openai\b", batch, re.MULTILINE)  # imported inside functions only


def test_a_first_failure_is_the_controllers_first_attempt_not_a_second_request() -> None:
    """call_with_retries tries once before it builds a controller; a failure there is replayed as the
    controller's attempt 1: each failure is logged once, in order, and nothing is sent twice."""
    policy = RetryPolicy(max_retries=3, backoff_base_s=0.0, backoff_max_s=0.0)
    seen: list[tuple[int, str]] = []
    retrying = policy.retrying(lambda state: seen.append((state.attempt_number, str(state.outcome.exception()))))
    sent: list[int] = []
    outcomes: list[Any] = [RequestFailed("HTTP 503", retryable=True), RequestFailed("timeout", retryable=True), "ok"]

    async def attempt() -> str:
        sent.append(1)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert asyncio.run(call_with_retries(retrying, attempt)) == ("ok", 3)
    assert len(sent) == 3 and seen == [(1, "HTTP 503"), (2, "timeout")]

    class NoCopies:
        def copy(self) -> Any:
            raise AssertionError("a controller for a request that succeeded at once")

    async def fine() -> str:
        return "ok"

    assert asyncio.run(call_with_retries(NoCopies(), fine)) == ("ok", 1)  # type: ignore[arg-type]
