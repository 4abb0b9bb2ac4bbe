"""vLLM in the evalpipe process (``vllm.LLM``): the fastest path on a GPU box, no HTTP.

vLLM is the optional extra ``evalpipe[vllm]`` and is imported only when this backend is built,
so nothing else in evalpipe (and no test) needs it.

Why a batcher: ``llm.chat`` / ``llm.generate`` are synchronous and fastest with many prompts at
once, while the runner hands out one prompt per coroutine. :class:`VLLMBackend` collects the
prompts that arrive within a short window into a batch, sorts the batch so prompts sharing a
few-shot prefix are adjacent (prefix caching is on), runs it in a worker thread, and resolves each
prompt's future. Answers therefore arrive — and are committed to the response store — one batch
at a time; ``max_batch`` bounds how many answers a crash can cost.

A batch that fails is recorded as failed requests, and the run goes on; an engine that died
(vLLM's ``EngineDeadError``: its engine core process is gone) stops the run with the same one line
and exit code as a dead engine server (:class:`~evalpipe.engines.watch.EngineDied`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from evalpipe.backends.base import BackendError
from evalpipe.engines.watch import EngineDied, death_line
from evalpipe.records import Completion, Message, Prompt, Usage, chat_payload


@dataclass(frozen=True)
class VLLMConfig:
    model: str
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    revision: str | None = None
    max_batch: int = 512
    batch_window_s: float = 0.05
    seed: int = 0
    #: any other ``vllm.LLM`` keyword arguments (``--engine-arg``), e.g. quantization, enforce_eager
    extra: Mapping[str, Any] = field(default_factory=dict)


def _load_vllm() -> Any:
    try:
        import vllm  # noqa: PLC0415 - optional, GPU-only dependency
    except ImportError as exc:
        raise BackendError(
            "the in-process vLLM backend needs vLLM: pip install 'evalpipe[vllm]' (a CUDA GPU is required); "
            "or start a server (`evalpipe serve --engine vllm`) and use --base-url"
        ) from exc
    return vllm


def engine_dead(exc: BaseException) -> bool:
    """Whether ``exc`` says the engine itself is dead (vLLM's ``EngineDeadError``, from
    ``vllm.v1.engine.exceptions``; matched by name, so vLLM is not imported to ask), as opposed to
    one batch failing."""
    return any(cls.__name__ == "EngineDeadError" for cls in type(exc).__mro__)


def _sort_key(prompt: Prompt) -> str:
    if prompt.messages is not None:
        return "\x00".join(m.content for m in prompt.messages)
    return prompt.text or ""


class VLLMBackend:
    def __init__(self, config: VLLMConfig, llm: Any | None = None) -> None:
        self.config = config
        self.model = config.model
        self._vllm = _load_vllm()
        # the user's pass-through arguments come last: they may override a default (prefix caching)
        engine_kwargs: dict[str, Any] = {
            "tensor_parallel_size": config.tensor_parallel_size,
            "max_model_len": config.max_model_len,
            "dtype": config.dtype,
            "gpu_memory_utilization": config.gpu_memory_utilization,
            "revision": config.revision,
            "enable_prefix_caching": True,
            "seed": config.seed,
            **config.extra,
        }
        if llm is None:
            try:
                llm = self._vllm.LLM(model=config.model, **engine_kwargs)
            except Exception as exc:  # a bad option, no GPU memory, an unknown model: one clear line
                raise BackendError(f"vLLM could not start {config.model}: {type(exc).__name__}: {exc}") from exc
        self._llm = llm
        self._queue: list[tuple[Prompt, asyncio.Future[Completion]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._batches = 0
        self._requests = 0
        #: set when the engine died (vLLM's EngineDeadError): every later request raises it
        self._dead: EngineDied | None = None

    async def preflight(self) -> None:
        return None

    async def models(self) -> list[dict[str, Any]]:
        """The one model this engine holds, with its context length (as vLLM's server lists it)."""
        return [{"id": self.model, "max_model_len": await self.context_length()}]

    async def context_length(self) -> int | None:
        """The engine's ``max_model_len`` (what it was started with, or the model's own)."""
        engine = getattr(self._llm, "llm_engine", None)
        value = getattr(getattr(engine, "model_config", None), "max_model_len", None)
        return value if isinstance(value, int) and value > 0 else self.config.max_model_len

    async def count_tokens(self, content: str | Sequence[Message]) -> int | None:
        """Tokens by the engine's own tokenizer (a conversation through its chat template, with the
        generation prompt, as ``LLM.chat`` applies it); None when it cannot count that form."""
        try:
            tokenizer = self._llm.get_tokenizer()
            if isinstance(content, str):
                return len(tokenizer.encode(content, add_special_tokens=False))
            encoded = tokenizer.apply_chat_template(chat_payload(content), add_generation_prompt=True, tokenize=True)
        except Exception:  # no tokenizer, no chat template: the caller approximates
            return None
        ids = encoded["input_ids"] if isinstance(encoded, Mapping) else encoded
        return len(ids)

    def _die(self, exc: BaseException, batch: list[tuple[Prompt, asyncio.Future[Completion]]]) -> None:
        """The engine is dead: this batch's requests and every queued one raise :class:`EngineDied`."""
        self._dead = EngineDied(death_line("vLLM (in process)", type(exc).__name__, str(exc), "what it said"))
        waiting, self._queue = [*batch, *self._queue], []
        for _, future in waiting:
            if not future.done():
                future.set_exception(self._dead)

    async def complete(self, prompt: Prompt) -> Completion:
        if self._dead is not None:
            raise self._dead
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self._queue.append((prompt, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon())
        return await future

    async def _flush_soon(self) -> None:
        await asyncio.sleep(self.config.batch_window_s)
        while self._queue:
            batch, self._queue = self._queue[: self.config.max_batch], self._queue[self.config.max_batch:]
            # one flusher at a time (a new one starts only when this one is done): batches never overlap
            await self._run_batch(batch)

    def _sampling(self, prompt: Prompt) -> Any:
        return self._vllm.SamplingParams(**prompt.params.sampling_options())

    async def _run_batch(self, batch: list[tuple[Prompt, asyncio.Future[Completion]]]) -> None:
        batch = sorted(batch, key=lambda item: _sort_key(item[0]))
        chats = [(p, f) for p, f in batch if p.messages is not None]
        texts = [(p, f) for p, f in batch if p.messages is None]
        for group, is_chat in ((chats, True), (texts, False)):
            if not group:
                continue
            started = time.perf_counter()
            try:
                outputs = await asyncio.to_thread(self._generate, [p for p, _ in group], is_chat)
            except Exception as exc:  # the engine failed this batch: record, never crash the run …
                if engine_dead(exc):  # … unless the engine is dead: then every request fails, and the run stops
                    self._die(exc, batch)
                    return
                for _, future in group:
                    if not future.done():
                        future.set_result(Completion(text=None, error=f"vLLM error: {type(exc).__name__}: {exc}"))
                continue
            latency = time.perf_counter() - started
            self._batches += 1
            self._requests += len(group)
            for (_, future), output in zip(group, outputs):
                first = output.outputs[0]
                completion = Completion(
                    text=first.text,
                    finish_reason=getattr(first, "finish_reason", None),
                    usage=Usage(len(output.prompt_token_ids or []), len(first.token_ids or [])),
                    latency_s=latency,
                )
                if not future.done():
                    future.set_result(completion)

    def _generate(self, prompts: list[Prompt], is_chat: bool) -> list[Any]:
        sampling = [self._sampling(p) for p in prompts]
        if is_chat:
            return cast("list[Any]", self._llm.chat([chat_payload(p.messages or ()) for p in prompts], sampling, use_tqdm=False))
        return cast("list[Any]", self._llm.generate([p.text or "" for p in prompts], sampling, use_tqdm=False))

    async def aclose(self) -> None:
        if self._flusher is not None:
            await self._flusher

    def describe(self) -> Mapping[str, Any]:
        return {"kind": "vllm-inprocess", **{k: (dict(v) if k == "extra" else v) for k, v in self.config.__dict__.items()}}

    def stats(self) -> Mapping[str, Any]:
        return {"requests": self._requests, "batches": self._batches}
