"""A hostile or broken endpoint or judge cannot leak a secret into the results, exhaust memory or disk,
or stop a run with a traceback (issue 22, items 7, 8, 9, 10, 12, 13).

Every server here is on loopback (:mod:`tests.support.hostile_server`, :mod:`tests.support.fake_openai`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3

import pytest
from aiohttp import web
from typer.testing import CliRunner

from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig, usage_of
from evalpipe.context_fit import ContextTooSmall
from evalpipe.cli import app
from evalpipe.config import RunConfig
from evalpipe.jsonlimits import MAX_JSON_DEPTH, TooDeep, check_depth, loads
from evalpipe.judging.parse import parse_judgement
from evalpipe.records import GenerationParams, Message, Prompt, Usage
from evalpipe.pipeline.execute import execute
from tests.clue.conftest import FIXTURES
from tests.support.fake_openai import FakeOpenAIServer, TEXT_MARKER
from tests.support.hostile_server import HostileServer, chat_reply, connections_recorded

KEY = "sk-live-7Hq2Zr9Wm4Lp"
URL_PASSWORD = "url-pass-3141"
QUERY_SECRET = "query-secret-2718"
PROMPT = Prompt(params=GenerationParams(max_tokens=5), messages=(Message("user", "hello"),))


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def complete(backend: OpenAICompatBackend, prompt: Prompt = PROMPT):
    async def go():
        try:
            return await backend.complete(prompt)
        finally:
            await backend.aclose()
    return asyncio.run(go())


def reply_with(body: bytes | str, status: int = 200, **headers: str):
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=status, body=body if isinstance(body, bytes) else body.encode(),
                            content_type="application/json", headers=headers)
    return handler


# ---- item 7: credentials echoed in a normal 200 reply ------------------------------------------------


def secret_forms() -> dict[str, str]:
    basic = base64.b64encode(f"user:{URL_PASSWORD}".encode()).decode()
    return {"key": KEY, "bearer": f"Bearer {KEY}", "key-base64": base64.b64encode(KEY.encode()).decode().rstrip("="),
            "url-password": URL_PASSWORD, "basic": basic, "query": QUERY_SECRET,
            "query-base64": base64.b64encode(QUERY_SECRET.encode()).decode().rstrip("=")}


def echoing(body) -> str:
    """A model that repeats every credential form it could know, around a well-formed answer."""
    forms = secret_forms()
    text = body["messages"][-1]["content"].split(TEXT_MARKER, 1)[-1].split("\n", 1)[0]
    return (f"<response>{text}</response> key {forms['key']} / {forms['bearer']} / b64 {forms['key-base64']} / "
            f"url {forms['url-password']} / Basic {forms['basic']} / ?api-key={forms['query']} / "
            f"{forms['query-base64']} / json-escaped {json.dumps(forms['key'])[1:-1]}")


def test_no_form_of_a_secret_reaches_any_file_of_a_run_or_its_report(monkeypatch, tmp_path):
    monkeypatch.setenv("EVALPIPE_TEST_KEY", KEY)
    with FakeOpenAIServer(models=("m",), responder=echoing) as server:
        base = f"http://user:{URL_PASSWORD}@127.0.0.1:{server.port}/v1?api-key={QUERY_SECRET}"
        results = tmp_path / "results"
        ran = CliRunner().invoke(app, ["run", "--task", "ncbi_disease", "--limit", "3", "--base-url", base,
                                       "--model", "m", "--api-key-env", "EVALPIPE_TEST_KEY",
                                       "--results-dir", str(results), "--run-name", "r"])
        assert ran.exit_code == 0, ran.output
        assert server.total_requests == 3
    report = CliRunner().invoke(app, ["report", str(results / "r"), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    files = [p for p in [*results.rglob("*"), *(tmp_path / "report").rglob("*")] if p.is_file()]
    assert any(p.name == "responses.sqlite" for p in files) and any(p.name == "report.html" for p in files)
    for path in files:
        data = path.read_bytes()
        for name, form in secret_forms().items():
            assert form.encode() not in data, f"{name} form of a secret in {path}"
    samples = [json.loads(line) for line in (results / "r" / "samples.jsonl").read_text().splitlines()]
    assert all("***" in s["answer"] and s["answer"].startswith("<response>") for s in samples)
    summary = json.loads((results / "r" / "summary.json").read_text())
    assert '"scrubbed_answers": 3' in json.dumps(summary)


# ---- item 9: an answer size limit, enforced while reading ---------------------------------------------


def test_an_answer_over_the_limit_is_a_counted_error_not_retried_and_not_stored():
    big = json.dumps(chat_reply("x" * 5000)).encode()
    with HostileServer({"/v1/chat/completions": reply_with(big)}) as server:
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m", max_answer_bytes=4096))
        completion = complete(backend)
        assert completion.text is None and completion.attempts == 1
        assert "answer too large" in completion.error and "4096" in completion.error
        assert backend.stats()["errors"] == {"answer too large": 1}
        fits = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m", max_answer_bytes=len(big)))
        assert complete(fits).text == "x" * 5000


def test_a_body_without_length_is_cut_as_it_arrives_not_read_whole():
    """The server streams up to 256 MiB without a Content-Length; the client must stop near its limit."""
    sent = [0]

    async def endless(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        chunk = b'{"choices": [{"message": {"content": "' + b"y" * (1024 * 1024)
        try:
            for _ in range(256):
                await response.write(chunk)
                sent[0] += len(chunk)
                chunk = b"y" * (1024 * 1024)
        except (ConnectionError, RuntimeError):
            pass
        return response

    with HostileServer({"/v1/chat/completions": endless}) as server:
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m",
                                                         max_answer_bytes=2 * 1024 * 1024))
        completion = complete(backend)
    assert completion.text is None and "answer too large" in completion.error
    assert sent[0] < 64 * 1024 * 1024  # socket buffers hold a little more than the limit, never all of it


def test_max_answer_bytes_is_an_option_recorded_in_config(tmp_path):
    with HostileServer({"/v1/chat/completions": reply_with(json.dumps(chat_reply("z" * 3000)))}) as server:
        results = tmp_path / "results"
        ran = CliRunner().invoke(app, ["run", "--task", "ncbi_disease", "--limit", "2", "--base-url", server.url,
                                       "--model", "m", "--max-answer-bytes", "2048", "--max-retries", "0",
                                       "--results-dir", str(results), "--run-name", "r"])
        assert ran.exit_code == 3, ran.output  # failed requests: the documented exit code
    config = json.loads((results / "r" / "config.json").read_text())
    assert config["config"]["max_answer_bytes"] == 2048 and config["backend"]["max_answer_bytes"] == 2048
    samples = [json.loads(line) for line in (results / "r" / "samples.jsonl").read_text().splitlines()]
    assert all("answer too large" in s["error"] and s["answer"] is None for s in samples)
    with sqlite3.connect(results / "r" / "responses.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 0
    bad = CliRunner().invoke(app, ["run", "--task", "ncbi_disease", "--base-url", "http://127.0.0.1:9/v1",
                                   "--model", "m", "--max-answer-bytes", "0", "--results-dir", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--max-answer-bytes" in bad.output


# ---- items 10 (and every JSON from a server): one nesting limit ----------------------------------------


def test_the_one_json_nesting_limit():
    assert loads("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    for deep in ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "[" * 50_000, '{"a":' * 50_000,
                 "[" * 50_000 + "}" * 50_000):
        with pytest.raises(TooDeep):
            check_depth(deep)
    check_depth('["' + "[" * 1000 + '"]')  # brackets inside strings do not nest
    check_depth('["\\"' + "[" * 1000 + '"]')  # nor after an escaped quote
    with pytest.raises(TooDeep):
        check_depth('["\\\\", ' + "[" * 70 + "]" * 70 + "]")  # an escaped backslash ends no string


def test_a_completion_nested_fifty_thousand_deep_is_a_counted_failure():
    deep = '{"choices": [{"message": {"content": "x"}}], "extra": ' + "[" * 50_000 + "]" * 50_000 + "}"
    with HostileServer({"/v1/chat/completions": reply_with(deep)}) as server:
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m"))
        completion = complete(backend)
    assert completion.text is None and completion.attempts == 1 and "JSON nested too deep" in completion.error


def test_a_model_list_nested_too_deep_is_a_one_line_error():
    from evalpipe.backends.base import BackendError

    with HostileServer({"/v1/models": reply_with('{"data": ' + "[" * 50_000 + "]" * 50_000 + "}")}) as server:
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m"))

        async def go():
            try:
                await backend.preflight()
            finally:
                await backend.aclose()

        with pytest.raises(BackendError) as failed:
            asyncio.run(go())
    assert "\n" not in str(failed.value)


@pytest.mark.parametrize("reply,problem", [
    ('{"accuracy": NaN}', "not a number"), ('{"accuracy": Infinity}', "not a number"),
    ('{"accuracy": -Infinity}', "not a number"), ('{"accuracy": 1e999}', "not a number"),
    ('{"accuracy": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested deeper"),
    ("{" * 50_000, "nested deeper"),
])
def test_a_hostile_judge_reply_is_an_unusable_judgement_not_a_crash(reply, problem):
    read = parse_judgement(reply, ["accuracy"], (1, 5))
    assert read.ratings is None and problem in read.problem


# ---- item 13: impossible usage -------------------------------------------------------------------------


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": float("inf"), "completion_tokens": 3}, {"prompt_tokens": float("nan")},
    {"prompt_tokens": -5, "completion_tokens": 3}, {"completion_tokens": 1.5}, {"prompt_tokens": "12"},
    {"prompt_tokens": True}, {"prompt_tokens": 10**12},
])
def test_impossible_usage_is_stored_as_absent_and_counted(usage):
    with HostileServer({"/v1/chat/completions": reply_with(json.dumps(chat_reply("ok", usage)))}) as server:
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m"))
        completion = complete(backend)
        stats = backend.stats()
    assert completion.text == "ok" and completion.usage == Usage()
    assert stats["invalid_usage"] == 1


def test_possible_usage_is_kept():
    assert usage_of({"prompt_tokens": 12, "completion_tokens": 3.0}) == Usage(12, 3)
    assert usage_of(None) == Usage() and usage_of({"prompt_tokens": 0}) == Usage(0, None)


# ---- item 8: a context too small -------------------------------------------------------------------------


def test_a_server_reporting_a_context_of_eight_tokens_stops_the_run_before_any_generation(tmp_path):
    with FakeOpenAIServer(models=("m",), max_model_len=8) as server:
        from evalpipe.backends.factory import make_backend

        cfg = RunConfig(tasks=("clue_medisumqa",), model="m", base_url=server.url, data_dir=str(FIXTURES),
                        metric_options={"umls_extractor": "none"})
        with pytest.raises(ContextTooSmall) as small:
            asyncio.run(execute(cfg, make_backend, tmp_path))
        assert server.total_requests == 0
    message = str(small.value)
    assert "8 tokens" in message and "--context-length" in message and "GET /models" in message
    assert "\n" not in message


def test_a_context_that_cannot_hold_the_prompt_without_its_document_is_an_error(tmp_path):
    with FakeOpenAIServer(models=("m",)) as server:
        from evalpipe.backends.factory import make_backend

        cfg = RunConfig(tasks=("clue_medisumqa",), model="m", base_url=server.url, data_dir=str(FIXTURES),
                        context_length=300, metric_options={"umls_extractor": "none"})
        with pytest.raises(ContextTooSmall) as small:
            asyncio.run(execute(cfg, make_backend, tmp_path))
        assert server.total_requests == 0
    assert "300 tokens (--context-length)" in str(small.value) and "emptied" in str(small.value)


def test_the_cli_says_so_in_one_line(tmp_path):
    with FakeOpenAIServer(models=("m",), max_model_len=8) as server:
        result = CliRunner().invoke(app, ["run", "--task", "clue_medisumqa", "--data-dir", str(FIXTURES),
                                          "--base-url", server.url, "--model", "m",
                                          "--results-dir", str(tmp_path / "results")])
        assert server.total_requests == 0
    assert result.exit_code == 1 and "8 tokens" in result.output and "Traceback" not in result.output


# ---- item 13: --api-key-env naming an unset variable -----------------------------------------------------


@pytest.mark.parametrize("value", [None, ""])
def test_a_named_but_unset_key_variable_is_an_error_before_any_request(monkeypatch, tmp_path, value):
    if value is None:
        monkeypatch.delenv("EVALPIPE_NO_SUCH_KEY", raising=False)
    else:
        monkeypatch.setenv("EVALPIPE_NO_SUCH_KEY", value)
    connections = connections_recorded(monkeypatch)
    for args in (["run", "--task", "ncbi_disease", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                  "--api-key-env", "EVALPIPE_NO_SUCH_KEY", "--results-dir", str(tmp_path / "results")],
                 ["run", "--task", "ncbi_disease", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                  "--judge", "j=http://127.0.0.1:9/v1", "--judge-api-key-env", "EVALPIPE_NO_SUCH_KEY",
                  "--results-dir", str(tmp_path / "results")],
                 ["judge", str(tmp_path), "--judge", "j=http://127.0.0.1:9/v1",
                  "--judge-api-key-env", "EVALPIPE_NO_SUCH_KEY"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "EVALPIPE_NO_SUCH_KEY" in result.output and "is not set" in result.output
    assert connections == [] and not (tmp_path / "results").exists()


def test_the_default_key_variable_unset_still_sends_empty_to_a_local_server(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer(models=("m",)) as server:
        result = CliRunner().invoke(app, ["run", "--task", "ncbi_disease", "--limit", "1", "--base-url", server.url,
                                          "--model", "m", "--results-dir", str(tmp_path / "results")])
        assert result.exit_code == 0, result.output
        assert server.requests[-1].headers.get("authorization") == "Bearer EMPTY"


# ---- item 12: disk full while storing answers --------------------------------------------------------------


@pytest.mark.parametrize("failure", [sqlite3.OperationalError("database or disk is full"),
                                     OSError(28, "No space left on device")])
def test_disk_full_while_storing_answers_is_one_line_and_a_rerun_resumes(monkeypatch, tmp_path, failure):
    from evalpipe.store.answers import ResponseStore

    original = ResponseStore.put_many
    calls = [0]

    def fills_up(self, model, items):
        calls[0] += 1
        if calls[0] > 1:  # the first group of answers is stored, then the disk is full
            raise failure
        return original(self, model, items)

    args = ["run", "--task", "ncbi_disease", "--limit", "6", "--concurrency", "1", "--model", "m",
            "--results-dir", str(tmp_path / "results"), "--run-name", "r"]
    with FakeOpenAIServer(models=("m",)) as server:
        monkeypatch.setattr(ResponseStore, "put_many", fills_up)
        full = CliRunner().invoke(app, [*args, "--base-url", server.url])
        assert full.exit_code == 1, full.output
        assert "disk is full" in full.output and "run the same command again" in full.output
        assert "Traceback" not in full.output and "kept in" in full.output
        with sqlite3.connect(tmp_path / "results" / "r" / "responses.sqlite") as db:
            kept = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        assert kept >= 1 and f"the {kept} answers stored before are kept" in full.output
        monkeypatch.setattr(ResponseStore, "put_many", original)
        before = server.total_requests
        again = CliRunner().invoke(app, [*args, "--base-url", server.url])
        assert again.exit_code == 0, again.output
        assert server.total_requests - before == 6 - kept  # only what was not stored is asked again


def test_the_run_default_answer_limit_is_the_clients():
    from evalpipe.backends.client import DEFAULT_MAX_BODY_BYTES

    assert RunConfig(tasks=(), model="m").max_answer_bytes == DEFAULT_MAX_BODY_BYTES
    assert OpenAICompatConfig(base_url="http://127.0.0.1:1/v1", model="m").max_answer_bytes == DEFAULT_MAX_BODY_BYTES
