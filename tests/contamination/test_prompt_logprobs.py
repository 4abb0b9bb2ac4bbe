"""The OpenAI-compatible backend's prompt log-probabilities (Min-K % Prob's requests), on the wire."""

from __future__ import annotations

import asyncio
import json

import pytest

from evalpipe.backends.base import BackendError
from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
from evalpipe.contamination.logprobs import PromptLogprobs, logprob_prompt, token_logprobs, unavailable
from tests.support.fake_openai import FakeOpenAIServer


def _run(server: FakeOpenAIServer, work):
    async def main():
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="fake-model", max_retries=0))
        try:
            return await work(backend)
        finally:
            await backend.aclose()
    return asyncio.run(main())


def test_every_token_of_the_text_after_the_first_is_scored():
    with FakeOpenAIServer(responder=lambda body: "no") as server:
        async def work(backend):
            assert await unavailable(backend) is None
            return await PromptLogprobs(backend).complete(logprob_prompt("the cat sat on the mat"))
        completion = _run(server, work)
        body = server.last_body
    # the fake server: -1.0 a token, the last -3.0 (not what its responder answers); the first has none
    assert token_logprobs(completion.text) == [-1.0, -1.0, -1.0, -1.0, -3.0]
    assert body["echo"] is True and body["logprobs"] == 1 and body["max_tokens"] == 1 and body["temperature"] == 0.0
    assert json.loads(completion.text) == {"token_logprobs": [-1.0, -1.0, -1.0, -1.0, -3.0]}


def test_an_endpoint_without_them_is_told_apart_by_one_request():
    with FakeOpenAIServer(responder=lambda body: "no", logprobs=False) as server:
        async def work(backend):
            reason = await unavailable(backend)
            failed = await backend.prompt_logprobs(logprob_prompt("the cat sat on the mat"))
            with pytest.raises(BackendError, match="no prompt log-probabilities"):
                await backend.check_prompt_logprobs()
            return reason, failed
        reason, failed = _run(server, work)
    assert "returns no prompt log-probabilities" in reason
    assert failed.text is None and "no prompt log-probabilities" in failed.error


def test_a_field_that_is_no_text_is_one_clear_error(tmp_path):
    from evalpipe.config import RunConfig
    from evalpipe.contamination.probe import ProbeOptions, probe_items
    from evalpipe.outcome import RunError

    config = RunConfig(tasks=("clue_meqsum",), model="m", limit=3)
    _, items, skipped, _ = probe_items(config, ProbeOptions())
    assert [i.field for i in items] == ["question"] * 3 and not skipped
    with pytest.raises(RunError, match=r"input 'nope' \(--field\) does not exist; its inputs: question"):
        probe_items(config, ProbeOptions(field="nope"))
    _, none, skipped, _ = probe_items(config, ProbeOptions(min_tokens=10_000))
    assert not none and len(skipped) == 3  # too short: skipped and counted, not an error
