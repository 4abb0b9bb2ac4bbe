"""The in-process vLLM backend's batching, against a stand-in `vllm` module (no GPU here)."""

import asyncio
import sys
import types
from dataclasses import dataclass

import pytest

from evalpipe.backends.base import BackendError
from evalpipe.config import RunConfig
from evalpipe.runner import execute


@dataclass
class _Out:
    text: str
    token_ids: list
    finish_reason: str = "stop"


@dataclass
class _Result:
    outputs: list
    prompt_token_ids: list


class FakeLLM:
    """Mimics vllm.LLM.chat / generate: answers a perfect copy of the NCBI sentence, untagged."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls = []

    def chat(self, conversations, sampling, use_tqdm=False):
        self.calls.append(("chat", [c[-1]["content"] for c in conversations]))
        return [self._answer(c[-1]["content"]) for c in conversations]

    def generate(self, prompts, sampling, use_tqdm=False):
        self.calls.append(("generate", list(prompts)))
        return [self._answer(p) for p in prompts]

    def _answer(self, text):
        sentence = text.rsplit("Text to process:\n", 1)[-1].rsplit("Input:\n", 1)[-1].split("\n", 1)[0]
        return _Result([_Out(f"<response>{sentence}</response>", [1, 2, 3])], [0] * 10)


@pytest.fixture()
def fake_vllm(monkeypatch):
    module = types.SimpleNamespace(LLM=FakeLLM, SamplingParams=lambda **kw: kw)
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_prompts_are_batched_sorted_and_stored(tmp_path, fake_vllm):
    from evalpipe.backends.vllm_inprocess import VLLMBackend, VLLMConfig

    backend = VLLMBackend(VLLMConfig(model="fake", max_batch=16))
    config = RunConfig(tasks=("ncbi_disease",), model="fake", limit=40)
    outcome = asyncio.run(execute(config, lambda cfg: backend, tmp_path))
    m = outcome.metrics["ncbi_disease"]
    assert m["n"] == 40 and m["errors"] == 0 and m["parse_failure_rate"] == 0.0
    calls = backend._llm.calls
    assert all(kind == "chat" for kind, _ in calls)
    assert [len(batch) for _, batch in calls] == [16, 16, 8]
    for _, batch in calls:
        assert batch == sorted(batch)  # shared prefixes adjacent
    assert backend.stats() == {"requests": 40, "batches": 3}
    again = asyncio.run(execute(config, lambda cfg: pytest.fail("all answers are stored"), tmp_path))
    assert again.metrics == outcome.metrics


def test_engine_failure_becomes_sample_errors(tmp_path, fake_vllm):
    from evalpipe.backends.vllm_inprocess import VLLMBackend, VLLMConfig

    class Broken(FakeLLM):
        def chat(self, *args, **kwargs):
            raise RuntimeError("CUDA out of memory")

    backend = VLLMBackend(VLLMConfig(model="fake"), llm=Broken())
    outcome = asyncio.run(execute(RunConfig(tasks=("ncbi_disease",), model="fake", limit=3), lambda c: backend, tmp_path))
    assert outcome.metrics["ncbi_disease"]["errors"] == 3
    assert "CUDA out of memory" in outcome.run_dir.read_samples()[0]["error"]


def test_without_vllm_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import fails
    from evalpipe.backends.vllm_inprocess import VLLMBackend, VLLMConfig

    with pytest.raises(BackendError, match=r"pip install 'evalpipe\[vllm\]'"):
        VLLMBackend(VLLMConfig(model="x"))
