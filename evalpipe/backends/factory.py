"""Which backend answers a run: in-process vLLM, one OpenAI-compatible endpoint, or replicas.

Kept apart from the command line so tests and scripts build backends exactly as ``evalpipe run``
does.
"""

from __future__ import annotations

from collections.abc import Callable

from evalpipe.backends.base import Backend, BackendError
from evalpipe.config import RunConfig
from evalpipe.endpoints import redact_url


def make_backend(config: RunConfig) -> Backend:
    """The backend for a run: in-process vLLM, or the OpenAI-compatible client (one URL or replicas)."""
    if config.engine == "vllm-inprocess":
        from evalpipe.backends.vllm_inprocess import VLLMBackend, VLLMConfig

        from evalpipe.engines.launch import inprocess_kwargs

        named = {k: v for k, v in config.engine_options.items() if k != "extra"}
        return VLLMBackend(VLLMConfig(model=config.model, max_model_len=config.context_length,
                                      seed=config.seed or 0,
                                      extra=inprocess_kwargs(config.engine_options.get("extra") or {}), **named))
    from evalpipe.backends.liveness import Liveness
    from evalpipe.backends.openai_compat import OpenAICompatBackend, OpenAICompatConfig

    if not config.base_url:
        raise BackendError("no endpoint: pass --base-url URL (or set EVALPIPE_BASE_URL), e.g. "
                       "--base-url http://127.0.0.1:8000/v1 for a local vLLM server, or --engine llamacpp")
    urls = [config.base_url, *config.replicas]
    # one watch over every replica: the run stops only when none of them accepts a connection
    liveness = Liveness(config.unreachable_after_s)
    backends = [
        OpenAICompatBackend(OpenAICompatConfig(
            base_url=url, model=config.model, api_key_env=config.api_key_env,
            concurrency=config.concurrency, timeout_s=config.timeout_s, max_retries=config.max_retries,
            unreachable_after_s=config.unreachable_after_s, max_answer_bytes=config.max_answer_bytes,
        ), liveness)
        for url in urls
    ]
    if len(backends) == 1:
        return backends[0]
    from evalpipe.backends.replicas import ReplicaBackend

    return ReplicaBackend(backends, [redact_url(u) for u in urls])


class OnceFactory:
    """A backend factory that builds at most one backend and hands the same one to every stage.

    Budgeting (the model's context, token counts) and fetching (preflight, answers) then share one
    backend: ``GET /models`` is asked once, and counts and answers travel on the same keep-alive
    connections. Nothing is built until a stage asks, so a run whose answers are all stored needs
    no endpoint. :meth:`aclose` closes what was built.
    """

    def __init__(self, factory: Callable[[RunConfig], Backend]) -> None:
        self._factory = factory
        self.backend: Backend | None = None

    def __call__(self, config: RunConfig) -> Backend:
        if self.backend is None:
            self.backend = self._factory(config)
        return self.backend

    async def aclose(self) -> None:
        if self.backend is not None:
            await self.backend.aclose()
