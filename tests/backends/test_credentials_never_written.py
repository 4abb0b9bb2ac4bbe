"""No credential, in any form, reaches a file of a run or its output (issue 14, item 5).

A careless server quotes the request's ``Authorization`` header back in its errors. Runs with each
credential form — an API key (``Bearer``), ``user:password@`` in the base URL (``Basic``), and a
key in the URL's query string — must leave no form of any of them in any file of the run
directory (``responses.sqlite`` included, read as bytes), in the command's output, or in the log.
"""

from __future__ import annotations

import base64
import itertools
import logging
from pathlib import Path
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from evalpipe.cli import app
from tests.support.fake_openai import Fault, FakeOpenAIServer

KEY = "sk-live-4f9a1c77d2e0b3aa"
USER, PASSWORD = "alice", "p@ss/w0rd!Zebra"
QUERY_KEY = "q-secret-5512ab"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def forms() -> list[str]:
    """Every way the credentials could be written."""
    return [KEY, f"Bearer {KEY}", f"{USER}:{PASSWORD}", PASSWORD, quote(PASSWORD, safe=""), BASIC, f"Basic {BASIC}",
            QUERY_KEY]


def echoing():
    """A fault policy: every other request a 401 quoting the header, the others a 500 quoting it
    (retried, then recorded)."""
    turn = itertools.count()

    def policy(request) -> Fault:
        auth = request.headers.get("authorization", "")
        if next(turn) % 2:
            return Fault("status", 500, message=f"upstream rejected {auth} for {request.path}")
        return Fault("echo_auth", 401)

    return policy


@pytest.mark.parametrize("form", ["bearer", "basic", "query"])
def test_no_credential_form_is_written_anywhere(form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("EVALPIPE_TEST_CRED_KEY", KEY)
    with FakeOpenAIServer(models=("fake-model",)) as server:
        server.set_fault_policy(echoing())
        url = {
            "bearer": server.url,
            "basic": server.url.replace("http://", f"http://{USER}:{quote(PASSWORD, safe='')}@"),
            "query": f"{server.url}?api-key={QUERY_KEY}",
        }[form]
        results = tmp_path / "results"
        outcome = CliRunner().invoke(app, [
            "run", "--task", "ncbi_disease", "--limit", "4", "--base-url", url, "--model", "fake-model",
            "--api-key-env", "EVALPIPE_TEST_CRED_KEY", "--max-retries", "1", "--results-dir", str(results),
        ])
        sent = {r.headers.get("authorization") for r in server.requests}
    assert outcome.exit_code == 3, outcome.output  # every request failed for good: the run says so
    # the server really saw (and quoted back) the credential
    assert sent == ({f"Basic {BASIC}"} if form == "basic" else {f"Bearer {KEY}"})
    files = [p for p in results.rglob("*") if p.is_file()]
    assert any(p.name == "responses.sqlite" for p in files) and any(p.name == "samples.jsonl" for p in files)
    samples = (next(p for p in files if p.name == "samples.jsonl")).read_text()
    # the errors are kept, the credential is not
    assert "HTTP 401" in samples and "HTTP 500" in samples and "***" in samples
    for path in files:
        blob = path.read_bytes()
        for secret in forms():
            assert secret.encode() not in blob, f"{secret!r} written to {path.name}"
    for secret in forms():
        assert secret not in outcome.output and secret not in caplog.text


def test_a_key_in_the_query_string_is_scrubbed_from_backend_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
    from evalpipe.records import GenerationParams, Prompt

    with FakeOpenAIServer(models=("fake-model",)) as server:
        server.set_fault_policy(lambda request: Fault("status", 400, message=f"bad key {QUERY_KEY} in {request.path}"))
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=f"{server.url}?api-key={QUERY_KEY}",
                                                         model="fake-model", max_retries=0))

        async def main():
            try:
                return await backend.complete(Prompt(params=GenerationParams(max_tokens=4), text="x"))
            finally:
                await backend.aclose()

        completion = asyncio.run(main())
    assert completion.error is not None and "HTTP 400" in completion.error
    shown = completion.error + repr(backend.describe()) + repr(completion)
    assert QUERY_KEY not in shown
