"""``vllm serve`` as a managed subprocess (GPU machines).

evalpipe then talks to it over HTTP with the same backend as any OpenAI-compatible server. vLLM
is an optional extra (``pip install 'evalpipe[vllm]'``) and is never imported here: only its
command-line entry point is run.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from evalpipe.engines.llamacpp import EngineUnavailable
from evalpipe.engines.server import ServerSpec, free_port


def vllm_server(
    model: str,
    max_model_len: int | None = None,
    tensor_parallel_size: int = 1,
    dtype: str | None = None,
    gpu_memory_utilization: float | None = None,
    revision: str | None = None,
    port: int | None = None,
    extra_args: Sequence[str] = (),
) -> ServerSpec:
    exe = shutil.which("vllm") or str(Path(sys.executable).with_name("vllm"))
    if not Path(exe).exists():
        raise EngineUnavailable("vLLM is not installed: pip install 'evalpipe[vllm]' (needs a CUDA GPU)")
    port = port or free_port()
    name = model
    args = [exe, "serve", model, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", name,
            "--tensor-parallel-size", str(tensor_parallel_size), "--enable-prefix-caching"]
    if max_model_len:
        args += ["--max-model-len", str(max_model_len)]
    if dtype:
        args += ["--dtype", dtype]
    if gpu_memory_utilization:
        args += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    if revision:
        args += ["--revision", revision]
    args += list(extra_args)
    return ServerSpec(
        name="vLLM",
        command=args,
        base_url=f"http://127.0.0.1:{port}/v1",
        model=name,
        health_url=f"http://127.0.0.1:{port}/health",
        context_length=max_model_len,
    )
