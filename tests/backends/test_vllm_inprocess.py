"""The in-process vLLM backend's batching, against a stand-in `vllm` module (no GPU here)."""

import asyncio
import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

from evalpipe.backends.base import BackendError
from evalpipe.config import RunConfig
from evalpipe.pipeline.execute import execute

STANDIN = Path(__file__).resolve().parents[1] / "support" / "standin_vllm" / "vllm" / "__init__.py"


@pytest.fixture()
def fake_vllm(monkeypatch) -> types.ModuleType:
    """tests/support/standin_vllm/vllm, loaded fresh as ``vllm`` (its classes record calls)."""
    spec = importlib.util.spec_from_file_location("vllm", STANDIN)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "vllm", module)  # before running it: its dataclasses look it up
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def built(fake_vllm, monkeypatch):
    """Every ``vllm.LLM`` the code under test builds, in order."""
    engines = []

    class Recording(fake_vllm.LLM):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            engines.append(self)

    monkeypatch.setattr(fake_vllm, "LLM", Recording)
    return engines


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

    class Broken(fake_vllm.LLM):
        def chat(self, *args, **kwargs):
            raise RuntimeError("CUDA out of memory")

    backend = VLLMBackend(VLLMConfig(model="fake"), llm=Broken("fake"))
    outcome = asyncio.run(execute(RunConfig(tasks=("ncbi_disease",), model="fake", limit=3), lambda c: backend, tmp_path))
    assert outcome.metrics["ncbi_disease"]["errors"] == 3
    assert "CUDA out of memory" in outcome.run_dir.read_samples()[0]["error"]


def test_without_vllm_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import fails
    from evalpipe.backends.vllm_inprocess import VLLMBackend, VLLMConfig

    with pytest.raises(BackendError, match=r"pip install 'evalpipe\[vllm\]'"):
        VLLMBackend(VLLMConfig(model="x"))


def test_cli_engine_vllm_inprocess_passes_the_options_through(tmp_path, fake_vllm, built, monkeypatch):
    """``evalpipe run --engine vllm-inprocess`` end to end: engine options reach ``vllm.LLM``,
    generation options reach ``SamplingParams``, and the completion form goes through generate."""
    from typer.testing import CliRunner

    from evalpipe.cli import app

    sampling = []
    real = fake_vllm.SamplingParams
    monkeypatch.setattr(fake_vllm, "SamplingParams", lambda **kw: sampling.append(kw) or real(**kw))
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


def test_engine_args_reach_the_in_process_engine(tmp_path, built):
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
