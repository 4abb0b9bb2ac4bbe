"""How to start the local server an ``--engine`` names (its command line, URL and model)."""

from __future__ import annotations

from evalpipe.engines.server import ServerSpec

#: engines ``evalpipe run --engine`` knows: two servers and vLLM in the evalpipe process
ENGINES = ("llamacpp", "vllm", "vllm-inprocess")


def server_spec(engine: str, model: str | None, context_length: int | None, options: dict) -> ServerSpec:
    """How to start the local server for ``--engine`` (llama.cpp default model: bundled SmolLM2)."""
    if engine == "llamacpp":
        from evalpipe.engines.llamacpp import llamacpp_server

        return llamacpp_server(model_path=model, n_ctx=context_length or 8192,
                               n_threads=options.get("n_threads"))
    from evalpipe.engines.vllm_server import vllm_server

    if not model:
        raise ValueError("--engine vllm needs --model (a local model folder or a model name)")
    return vllm_server(model, max_model_len=context_length,
                       **{k: v for k, v in options.items() if k != "n_threads"})
