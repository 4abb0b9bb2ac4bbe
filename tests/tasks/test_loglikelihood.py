"""Log-likelihood scoring of multiple-choice options (``--mcqa-scoring loglikelihood``) against the
loopback fake server: the request (echo + logprobs, one prompt per option), the sum over the
continuation's tokens, the chosen option, resume and re-scoring from stored log-probabilities, and a
clear error where an endpoint cannot return prompt log-probabilities."""

from __future__ import annotations

import asyncio
import json

import pytest

from evalpipe.backends.base import BackendError
from evalpipe.backends.factory import make_backend
from evalpipe.backends.echo_logprobs import choice_logprobs as _choice_logprobs
from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
from evalpipe.backends.retry import RequestFailed
from evalpipe.config import RunConfig
from evalpipe.outcome import RunError
from evalpipe.records import Example, GenerationParams, Prompt
from evalpipe.results import RunDir
from evalpipe.pipeline.execute import execute
from evalpipe.tasks.kinds.multiple_choice import parse_logprobs
from evalpipe.tasks.registry import get_task
from tests.support.fake_openai import FakeOpenAIProcess, FakeOpenAIServer, ScriptedResponder
from tests.support.scripted_backend import ScriptedBackend
from tests.tasks import mcqa_synthetic as syn
from tests.test_cli import evalpipe, only_run

#: the fake server prefers, after each question, the letter this maps it to (MedQA synthetic test rows)
PREFERRED = {"scurvy": "C", "insulin": "B", "opioid": "D", "peaked": "D", "forearm": "B"}  # opioid: wrong (A)


def reply(choices):
    return {"choices": [{"index": i, "logprobs": {"tokens": t, "token_logprobs": v, "text_offset": o}}
                        for i, (t, v, o) in enumerate(choices)]}


def test_continuation_logprob_is_the_sum_of_its_tokens_after_the_prompt():
    text = "Q?\nAnswer:"
    # " A" is one token; " B" two (" B", "b"); the generated token after each is left out
    data = reply([([ "Q?", "\nAnswer:", " A", " x"], [None, -1.0, -0.25, -9.0], [0, 2, 10, 12]),
                  (["Q?", "\nAnswer:", " B", "b", " x"], [None, -1.0, -0.5, -0.75, -9.0], [0, 2, 10, 12, 13])])
    scores, tokens = _choice_logprobs(data, text, (" A", " Bb"))
    assert scores == {" A": -0.25, " Bb": -1.25} and tokens == {" A": 1, " Bb": 2}


def test_a_reply_without_prompt_logprobs_is_a_final_failure():
    with pytest.raises(RequestFailed) as failure:
        _choice_logprobs({"choices": [{"index": 0, "text": "x", "logprobs": None}]}, "Q", (" A",))
    assert not failure.value.retryable and failure.value.reason == "no prompt log-probabilities"
    merged = reply([(["Q A", " x"], [None, -1.0], [0, 3])])  # the continuation merged into the prompt's token
    with pytest.raises(RequestFailed, match="merged into the prompt"):
        _choice_logprobs(merged, "Q", (" A",))


def test_parse_picks_the_most_likely_option_and_flags_ties():
    ex = Example("q", {"options": [{"letter": "A", "text": "x"}, {"letter": "B", "text": "y"}]}, "B")
    assert parse_logprobs(json.dumps({"logprobs": {" A": -2.0, " B": -0.5}}), ex).value == "B"
    tie = parse_logprobs(json.dumps({"logprobs": {" A": -1.0, " B": -1.0}}), ex)
    assert tie.value == "A" and tie.diagnostics["tie"]
    assert parse_logprobs("not json", ex).failed and parse_logprobs('{"logprobs": {" A": -1}}', ex).failed
    assert get_task("medqa").choice_scoring is not None and get_task("clue_mednli").choice_scoring is None


def test_backend_request_and_answer_against_the_fake_server():
    async def go():
        server = FakeOpenAIServer(responder=ScriptedResponder({"scurvy": "C"}), record=True)
        await server.serve_async()
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model=server.models[0]))
        try:
            await backend.check_choice_scoring()
            prompt = Prompt(params=GenerationParams(max_tokens=1), text="Which vitamin? scurvy\nAnswer:",
                            choices=(" A", " B", " C"))
            completion = await backend.complete(prompt)
            body = server.requests[-1].body
        finally:
            await backend.aclose()
            await server.close_async()
        return completion, body

    completion, body = asyncio.run(go())
    assert body["echo"] is True and body["logprobs"] == 1 and body["max_tokens"] == 1
    assert body["prompt"] == ["Which vitamin? scurvy\nAnswer: A", "Which vitamin? scurvy\nAnswer: B",
                              "Which vitamin? scurvy\nAnswer: C"]
    assert json.loads(completion.text) == {"logprobs": {" A": -3.0, " B": -3.0, " C": -0.1},
                                           "tokens": {" A": 1, " B": 1, " C": 1}}


def test_an_endpoint_without_prompt_logprobs_is_a_clear_error_before_any_request(tmp_path):
    path = syn.write_medqa(tmp_path / "data")

    async def go():
        server = FakeOpenAIServer(logprobs=False)
        await server.serve_async()
        config = RunConfig(tasks=("medqa",), model=server.models[0], base_url=server.url,
                           data={"medqa": str(path)}, choice_scoring="loglikelihood")
        try:
            with pytest.raises(BackendError, match="cannot score options by log-likelihood.*use --mcqa-scoring "
                                                   "generate"):
                await execute(config, make_backend, tmp_path / "results")
            return server.total_requests
        finally:
            await server.close_async()

    assert asyncio.run(go()) == 1  # the one probe, no question sent


def test_a_backend_without_the_request_type_is_refused(tmp_path):
    path = syn.write_medqa(tmp_path / "data")
    config = RunConfig(tasks=("medqa",), model="m", base_url="http://127.0.0.1:1/v1", data={"medqa": str(path)},
                       choice_scoring="loglikelihood")
    with pytest.raises(RunError, match="needs an OpenAI-compatible /v1/completions endpoint"):
        asyncio.run(execute(config, lambda _: ScriptedBackend(lambda p: "A"), tmp_path / "results"))


def test_loglikelihood_run_from_the_command_line_resumes_and_rescores(tmp_path):
    path = syn.write_medqa(tmp_path / "data")
    script = tmp_path / "answers.json"
    script.write_text(json.dumps(PREFERRED))
    args = ("run", "--task", "medqa", "--data", f"medqa={path}", "--mcqa-scoring", "loglikelihood",
            "--model", "fake-model", "--results-dir", str(tmp_path / "results"))
    with FakeOpenAIProcess(latency=0.0, script=script) as server:
        first = evalpipe(*args, "--base-url", server.url)
        assert first.returncode == 0, first.stderr
        sent = server.stats()["total_requests"]
        again = evalpipe(*args, "--base-url", server.url)
        assert again.returncode == 0 and server.stats()["total_requests"] == sent  # nothing asked again
    run = only_run(tmp_path / "results")
    metrics = json.loads((run / "metrics.json").read_text())["medqa"]
    assert metrics["accuracy"] == pytest.approx(4 / 5) and metrics["parse_failure_rate"] == 0.0
    samples = RunDir(run).read_samples(prompts=True)  # the prompts are kept once, in the store
    assert samples[0]["prompt"]["choices"] == [" A", " B", " C", " D"]
    assert samples[0]["prompt"]["text"].endswith("D. Vitamin D\nAnswer:")  # the completion form
    assert samples[0]["prediction"] == "C" and json.loads(samples[0]["answer"])["logprobs"][" C"] == -0.1
    config = json.loads((run / "config.json").read_text())["config"]
    assert config["choice_scoring"] == "loglikelihood" and "__" in run.name
    rescored = evalpipe("score", str(run))  # no server: the log-probabilities are the stored answers
    assert rescored.returncode == 0, rescored.stderr
    assert json.loads((run / "metrics.json").read_text())["medqa"] == metrics


def test_generate_and_loglikelihood_runs_are_different_runs():
    generate = RunConfig(tasks=("medqa",), model="m")
    assert generate.default_run_name() != RunConfig(tasks=("medqa",), model="m",
                                                    choice_scoring="loglikelihood").default_run_name()
    with pytest.raises(ValueError, match="--mcqa-scoring must be generate or loglikelihood"):
        RunConfig(tasks=("medqa",), model="m", choice_scoring="logprob")
