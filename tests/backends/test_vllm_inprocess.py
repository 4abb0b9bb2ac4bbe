"""The in-process vLLM backend's batching, against a stand-in `vllm` module (no GPU here)."""

import asyncio
import json
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


#: the engine options ``vllm.LLM(**kwargs)`` passes on to ``EngineArgs`` that evalpipe uses (names
#: checked against vLLM 0.33.0's ``vllm/engine/arg_utils.py``)
ENGINE_ARGS = {"max_model_len", "enable_prefix_caching", "max_num_seqs", "enforce_eager"}


@dataclass(frozen=True)
class FakeSamplingParams:
    """The fields of vLLM 0.33.0's ``SamplingParams`` that evalpipe sets; any other name fails."""

    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list | None = None


class FakeLLM:
    """Mimics vllm.LLM.chat / generate: answers a perfect copy of the NCBI sentence, untagged.

    Signatures follow vLLM 0.33.0's ``vllm/entrypoints/llm.py`` for the arguments evalpipe passes,
    so a renamed or unknown argument fails here as it would on a GPU machine.
    """

    def __init__(self, model=None, *, tensor_parallel_size=1, dtype="auto", revision=None, seed=0,
                 gpu_memory_utilization=0.92, **kwargs):
        unknown = set(kwargs) - ENGINE_ARGS
        if unknown:
            raise TypeError(f"unknown engine arguments {unknown}")
        self.kwargs = {"model": model, "tensor_parallel_size": tensor_parallel_size, "dtype": dtype,
                       "revision": revision, "seed": seed, "gpu_memory_utilization": gpu_memory_utilization,
                       **kwargs}
        self.calls = []

    @staticmethod
    def _check(prompts, sampling):
        assert isinstance(sampling, list) and len(sampling) == len(prompts)
        assert all(isinstance(s, FakeSamplingParams) for s in sampling)

    def chat(self, messages, sampling_params=None, use_tqdm=True, **kwargs):
        self._check(messages, sampling_params)
        assert all(isinstance(m, dict) and set(m) == {"role", "content"} for c in messages for m in c)
        self.calls.append(("chat", [c[-1]["content"] for c in messages]))
        return [self._answer(c[-1]["content"]) for c in messages]

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, **kwargs):
        self._check(prompts, sampling_params)
        self.calls.append(("generate", list(prompts)))
        return [self._answer(p) for p in prompts]

    def _answer(self, text):
        sentence = text.rsplit("Text to process:\n", 1)[-1].rsplit("Input:\n", 1)[-1].split("\n", 1)[0]
        return _Result([_Out(f"<response>{sentence}</response>", [1, 2, 3])], [0] * 10)


@pytest.fixture()
def fake_vllm(monkeypatch):
    module = types.SimpleNamespace(LLM=FakeLLM, SamplingParams=FakeSamplingParams)
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


def test_cli_engine_vllm_inprocess_passes_the_options_through(tmp_path, fake_vllm, monkeypatch):
    """``evalpipe run --engine vllm-inprocess`` end to end: engine options reach ``vllm.LLM``,
    generation options reach ``SamplingParams``, and the completion form goes through generate."""
    from typer.testing import CliRunner

    from evalpipe.cli import app

    built = []

    class Recording(FakeLLM):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(fake_vllm, "LLM", Recording)
    sampling = []
    monkeypatch.setattr(fake_vllm, "SamplingParams", lambda **kw: sampling.append(kw) or FakeSamplingParams(**kw))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"max_position_embeddings": 2048}')
    result = CliRunner().invoke(app, [
        "run", "--task", "ncbi_disease", "--limit", "4", "--engine", "vllm-inprocess", "--model", str(model),
        "--tensor-parallel-size", "2", "--dtype", "bfloat16", "--gpu-memory-utilization", "0.8",
        "--revision", "abc123", "--context-length", "2048", "--seed", "7", "--endpoint", "completions",
        "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    (llm,) = built
    assert llm.kwargs == {"model": str(model), "tensor_parallel_size": 2, "dtype": "bfloat16", "revision": "abc123",
                          "seed": 7, "gpu_memory_utilization": 0.8, "max_model_len": 2048,
                          "enable_prefix_caching": True}
    assert [kind for kind, _ in llm.calls] == ["generate"]
    assert len(sampling) == 4 and all(s["seed"] == 7 and s["temperature"] == 0.0 and s["stop"] for s in sampling)
    recorded = json.loads(next((tmp_path / "results").glob("*/config.json")).read_text())
    assert recorded["config"]["concurrency"] == 256  # the in-process default: big batches
    assert "f1" in result.output


def _inprocess_cli(tmp_path, *extra):
    from typer.testing import CliRunner

    from evalpipe.cli import app

    return CliRunner().invoke(app, ["run", "--task", "ncbi_disease", "--limit", "2", "--engine", "vllm-inprocess",
                                    "--model", "some/model", "--results-dir", str(tmp_path / "results"), *extra])


def test_engine_args_reach_the_in_process_engine(tmp_path, fake_vllm, monkeypatch):
    built = []

    class Recording(FakeLLM):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(fake_vllm, "LLM", Recording)
    result = _inprocess_cli(tmp_path, "--engine-arg", "max-num-seqs=64", "--engine-arg", "enforce-eager=true",
                            "--engine-arg", "enable-prefix-caching=false")
    assert result.exit_code == 0, result.output
    (llm,) = built
    assert llm.kwargs["max_num_seqs"] == 64 and llm.kwargs["enforce_eager"] is True
    assert llm.kwargs["enable_prefix_caching"] is False  # the user's word wins over evalpipe's default


def test_an_engine_that_cannot_start_is_one_clear_error(tmp_path, fake_vllm):
    result = _inprocess_cli(tmp_path, "--engine-arg", "no-such-option=1")
    assert result.exit_code == 1
    assert "vLLM could not start some/model: TypeError" in result.output and "no_such_option" in result.output
    assert "Traceback" not in result.output
