"""Patient data never leaves through a proxy or a redirect (issue 22, item 1).

One rule (:func:`evalpipe.endpoints.route_problem`) judges the endpoint *and* the proxy the environment
selects for it; no client follows a redirect. Every test talks to loopback only: a "non-local" proxy or
redirect target is a documentation address (192.0.2.1, RFC 5737) that nothing may ever connect to, and
:func:`tests.support.hostile_server.connections_recorded` fails a test on any attempt.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from typer.testing import CliRunner

from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
from evalpipe.cli import app
from evalpipe.config import RunConfig
from evalpipe.endpoints import proxy_for, route_problem, route_record
from evalpipe.records import GenerationParams, Message, Prompt
from evalpipe.outcome import RunError
from evalpipe.pipeline.execute import execute
from tests.clue.conftest import FIXTURES
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.hostile_server import HostileServer, connections_recorded

OUTSIDE_PROXY = "http://proxyuser:proxy-secret-77@192.0.2.1:3128"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                   "no_proxy")


@pytest.fixture(autouse=True)
def clean_proxies(monkeypatch, tmp_path):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "netrc").write_text("")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # no ~/.netrc credentials for proxies in these tests
    return monkeypatch


@pytest.fixture()
def connections(monkeypatch):
    return connections_recorded(monkeypatch)


def credentialed(base_url: str, **kw) -> RunConfig:
    return RunConfig(tasks=("clue_medisumqa",), model="m", base_url=base_url, data_dir=str(FIXTURES),
                     metric_options={"umls_extractor": "none"}, **kw)


# ---- the rule --------------------------------------------------------------------------------------


def test_the_proxy_the_client_uses_is_the_proxy_the_rule_judges(clean_proxies):
    url = "http://127.0.0.1:8000/v1"
    assert proxy_for(url) is None and route_problem(url) is None
    clean_proxies.setenv("HTTP_PROXY", OUTSIDE_PROXY)
    assert proxy_for(url) == OUTSIDE_PROXY
    problem = route_problem(url)
    assert problem is not None and "192.0.2.1:3128" in problem and "NO_PROXY" in problem
    assert "proxy-secret-77" not in problem and "proxyuser" not in problem
    assert route_record(url) == {"proxy": "192.0.2.1:3128", "redirects": "not followed"}
    assert route_problem("https://127.0.0.1/v1") is None  # HTTP_PROXY is for http:// URLs only
    clean_proxies.setenv("HTTPS_PROXY", "http://192.0.2.1:3129")
    assert "192.0.2.1:3129" in route_problem("https://127.0.0.1/v1")
    clean_proxies.setenv("NO_PROXY", "127.0.0.1")  # the endpoint's host bypasses the proxy
    assert proxy_for(url) is None and route_problem(url) is None
    assert route_record(url) == {"proxy": None, "redirects": "not followed"}


def test_a_local_proxy_is_allowed_and_the_endpoint_rule_is_unchanged(clean_proxies):
    clean_proxies.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    assert route_problem("http://10.1.2.3:8000/v1") is None
    assert "192.0.2.1" in route_problem("http://192.0.2.1/v1")
    clean_proxies.setenv("ALL_PROXY", "http://192.0.2.1:1080")  # not used by evalpipe's client
    assert proxy_for("http://127.0.0.1:8000/v1") == "http://127.0.0.1:3128"


# ---- run and judge refuse before any connection -------------------------------------------------------


def test_a_credentialed_run_through_an_outside_proxy_is_refused_before_any_connection(clean_proxies, connections,
                                                                                     tmp_path):
    clean_proxies.setenv("HTTP_PROXY", OUTSIDE_PROXY)
    with FakeOpenAIServer(models=("m",)) as server:
        with pytest.raises(RunError) as refused:
            asyncio.run(execute(credentialed(server.url), lambda c: pytest.fail("no backend may be made"), tmp_path))
        message = str(refused.value)
        assert "credentialed" in message and "192.0.2.1:3128" in message and "--allow-external-endpoint" in message
        assert "proxy-secret-77" not in message
        assert server.total_requests == 0 and connections == []


def test_the_cli_refuses_the_proxy_for_run_and_for_judges_in_one_line(clean_proxies, connections, tmp_path):
    clean_proxies.setenv("HTTP_PROXY", OUTSIDE_PROXY)
    with FakeOpenAIServer(models=("m",)) as server:
        result = CliRunner().invoke(app, ["run", "--task", "clue_medisumqa", "--data-dir", str(FIXTURES),
                                          "--base-url", server.url, "--model", "m",
                                          "--results-dir", str(tmp_path / "results")])
        assert result.exit_code == 1, result.output
        assert "192.0.2.1:3128" in result.output and "proxy-secret" not in result.output
        assert "Traceback" not in result.output
        assert server.total_requests == 0 and connections == []


def test_no_proxy_lets_a_credentialed_run_reach_its_local_endpoint_and_config_records_the_route(
        clean_proxies, connections, tmp_path):
    clean_proxies.setenv("HTTP_PROXY", OUTSIDE_PROXY)
    clean_proxies.setenv("NO_PROXY", "127.0.0.1")
    with FakeOpenAIServer(models=("m",)) as server:
        from evalpipe.backends.factory import make_backend

        outcome = asyncio.run(execute(credentialed(server.url, limit=2), make_backend, tmp_path))
        assert server.total_requests == 2
    assert set(connections) == {"127.0.0.1"}
    backend = json.loads((outcome.run_dir.path / "config.json").read_text())["backend"]
    assert backend["proxy"] is None and backend["redirects"] == "not followed"


def test_a_loopback_proxy_carries_the_requests_and_is_recorded(clean_proxies, connections, tmp_path):
    """The endpoint URL names a port where nothing listens: the answers can only come through the proxy
    (the fake server, which takes absolute-form requests as a forward proxy does)."""
    with FakeOpenAIServer(models=("m",)) as proxy:
        port = proxy.port
        clean_proxies.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        from evalpipe.backends.factory import make_backend

        outcome = asyncio.run(execute(credentialed("http://127.0.0.1:9/v1", limit=2), make_backend, tmp_path))
        assert proxy.total_requests == 2 and outcome.metrics["clue_medisumqa"]["errors"] == 0
    backend = json.loads((outcome.run_dir.path / "config.json").read_text())["backend"]
    assert backend["proxy"] == f"127.0.0.1:{port}"


# ---- redirects are never followed ---------------------------------------------------------------------


def _redirect(status: int, location: str):
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=status, headers={"Location": location})
    return handler


@pytest.mark.parametrize("status", [307, 302, 308, 301])
def test_a_redirect_to_an_outside_host_is_refused_and_nothing_is_resent(connections, status):
    target = "http://user:redirect-pw@192.0.2.1/v1/chat/completions?api-key=query-secret-9"
    with HostileServer({"/v1/chat/completions": _redirect(status, target)}) as server:
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m", max_retries=3))

        async def go():
            try:
                return await backend.complete(Prompt(params=GenerationParams(max_tokens=5),
                                                     messages=(Message("user", "patient text"),)))
            finally:
                await backend.aclose()

        completion = asyncio.run(go())
    assert completion.text is None and completion.attempts == 1  # refused, never retried or followed
    assert "redirect refused" in completion.error and "192.0.2.1" in completion.error
    assert "redirect-pw" not in completion.error and "query-secret" not in completion.error
    assert server.requests == [("POST", "/v1/chat/completions")]
    assert set(connections) == {"127.0.0.1"}


def test_a_run_whose_endpoint_redirects_records_the_error_per_sample_and_sends_nothing_elsewhere(connections,
                                                                                                tmp_path):
    with HostileServer({"/v1/chat/completions": _redirect(307, "http://192.0.2.1/v1/chat/completions")}) as server:
        from evalpipe.backends.factory import make_backend

        outcome = asyncio.run(execute(credentialed(server.url, limit=2), make_backend, tmp_path))
    assert outcome.metrics["clue_medisumqa"]["errors"] == 2 and set(connections) == {"127.0.0.1"}
    samples = [json.loads(line) for line in (outcome.run_dir.path / "samples.jsonl").read_text().splitlines()]
    assert all("redirect refused" in s["error"] and "192.0.2.1" in s["error"] for s in samples)


def test_a_redirecting_model_list_is_a_one_line_error(connections):
    with HostileServer({"/v1/models": _redirect(302, "https://192.0.2.1/login")}) as server:
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m"))

        async def go():
            try:
                await backend.preflight()
            finally:
                await backend.aclose()

        from evalpipe.backends.base import BackendError

        with pytest.raises(BackendError) as refused:
            asyncio.run(go())
    assert "302" in str(refused.value) and "192.0.2.1" in str(refused.value) and "\n" not in str(refused.value)
    assert set(connections) == {"127.0.0.1"}
