"""Answer the pending prompts: the worker pool, the queues, who answers them, the Batch API route.

Every answer is committed to the store the moment it arrives (in groups,
:mod:`evalpipe.pipeline.answer_writer`); an answer is counted only once it is committed. The
queued prompts are read from the store a page at a time and unpacked when sent, so only the
requests in flight exist in memory.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.backends.base import Backend
from evalpipe.backends.embeddings import Embedder, make_embedder
from evalpipe.backends.ranking import RankingBackend
from evalpipe.config import RunConfig
from evalpipe.outcome import RunError
from evalpipe.pipeline.answer_writer import AnswerWriter
from evalpipe.pipeline.prepared import PreparedTask
from evalpipe.pipeline.progress import ProgressSink
from evalpipe.records import Completion, Prompt
from evalpipe.store.answers import ResponseStore
from evalpipe.store.prompt_pack import unpack

#: a pending request: its prompt, rendered when it is sent
PromptSource = Callable[[], Prompt]


class _Packed:
    """A pending prompt as the store keeps it (packed JSON), unpacked when called (a small object:
    only the requests in flight and one page of the queue exist at a time)."""

    __slots__ = ("packed", "texts")

    def __init__(self, packed: str, texts: Mapping[str, str]) -> None:
        self.packed, self.texts = packed, texts

    def __call__(self) -> Prompt:
        return Prompt.from_json(unpack(json.loads(self.packed), self.texts))


def queued_prompts(store: ResponseStore, queue: str, texts: Mapping[str, str]) -> Iterator[tuple[str, PromptSource]]:
    """The prompts of a pending queue (:meth:`ResponseStore.queue_pending`), read page by page."""
    for page in store.pending_pages(queue):
        for key, packed in page:
            yield key, _Packed(packed, texts)


async def fetch_answers(
    pending: Mapping[str, PromptSource] | Iterable[tuple[str, PromptSource]],
    backend: Backend,
    store: ResponseStore,
    progress: ProgressSink,
    workers: int = 128,
    writer: AnswerWriter | None = None,
    results: dict[str, Completion] | None = None,
    count: int | None = None,
    failures: dict[str, Completion] | None = None,
) -> dict[str, Completion]:
    """Send every pending prompt once; commit each good answer to the store on arrival.

    ``pending`` is a mapping key → prompt source, or ``(key, source)`` pairs read as they are
    needed (the runner's queue in the store: ``count`` says how many). An answer is counted — in
    the results, and by ``progress`` — only once it is committed (``writer`` groups the commits of
    answers that arrive together: :mod:`evalpipe.pipeline.answer_writer`). A fixed pool of worker coroutines
    (not one task per prompt) pulls prompts from a shared iterator: with tens of thousands of
    prompts, one task each makes every garbage collection walk them all (measured: ~20 % more
    client CPU per request). The backend still decides how many requests are really in flight;
    ``workers`` only has to be at least that.

    Every completion goes into ``results`` (a new dict unless given), which is returned; with
    ``failures`` given instead, only the failed ones are kept there (the good ones are in the store:
    a run of 47,000 samples does not hold 47,000 answers).
    """
    if isinstance(pending, Mapping):
        count = len(pending) if count is None else count
        items: Iterator[tuple[str, PromptSource]] = iter(pending.items())
    else:
        items = iter(pending)
    keep = results if results is not None else ({} if failures is None else None)
    writer = writer if writer is not None else AnswerWriter(store, backend.model)

    async def worker() -> None:
        for key, source in items:
            completion = await backend.complete(source())
            if completion.ok:
                await writer.put(key, completion)
            elif failures is not None:
                failures[key] = completion
            if keep is not None:
                keep[key] = completion
            progress.advance(completion)

    n = workers if count is None else min(workers, count)
    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, n))]
    try:
        with store.checkpoints_deferred():  # none between requests: see ResponseStore.checkpoints_deferred
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        writer.flush()  # a run stopped early (engine died, endpoint gone) keeps every answer that arrived
    return keep if keep is not None else {}


@dataclass(frozen=True)
class Answerer:
    """Who answers a queue of pending prompts: the generating model (every generation task) or
    one retrieval task's ranker; ``plans`` are the plans whose prompts it answers."""

    prepared: tuple[PreparedTask, ...]
    queue: str
    pending: int

    @property
    def plans(self) -> list[str]:
        return [p.plan_name for p in self.prepared]

    def texts(self) -> dict[str, str]:
        return {k: v for p in self.prepared for k, v in p.packer.texts.items()}


def pending_queues(store: ResponseStore, prepared: Sequence[PreparedTask]) -> list[Answerer]:
    """The pending queues: one for the generating model, one per retrieval task (its own pool)."""
    groups = [tuple(p for p in prepared if not p.pool)] + [(p,) for p in prepared if p.pool]
    out: list[Answerer] = []
    for i, group in enumerate(g for g in groups if g):
        queue = f"pending_{i}"
        count = store.queue_pending(queue, [p.plan_name for p in group], exclude=[a.queue for a in out])
        out.append(Answerer(group, queue, count))
    return out


EmbedderFactory = Callable[[RunConfig], Embedder]


def embedder_for(config: RunConfig) -> Embedder:
    """The embedding model of a run's retrieval tasks, from its ``--embeddings-*`` options."""
    if not config.embeddings_url and not config.embeddings_path:
        raise RunError("retrieval tasks need an embedding model: --embeddings-url URL --embeddings-model NAME "
                       "(an OpenAI-compatible /v1 endpoint) or --embeddings-path DIR (a local sentence-transformers "
                       "folder)")
    return make_embedder(url=config.embeddings_url, model=config.embeddings_model, path=config.embeddings_path,
                         api_key_env=config.api_key_env, batch_size=config.embeddings_batch_size,
                         timeout_s=config.timeout_s)


def answerer_backend(config: RunConfig, queue: Answerer, store: ResponseStore,
                      backend_factory: Callable[[RunConfig], Backend], embedder_factory: EmbedderFactory) -> Backend:
    """The backend that answers ``queue``: the generating model, or a ranker over the task's own
    pool. Built only for a queue with pending prompts (nothing is built for work all stored)."""
    task = queue.prepared[0]
    if not task.pool:
        return backend_factory(config)
    assert task.spec.ranking is not None
    return RankingBackend(embedder_factory(config), task.pool, task.spec.ranking.depth, store,
                          batch_size=config.embeddings_batch_size or 64)


async def check_choice_scoring(backend: Backend) -> None:
    """Log-likelihood scoring needs an endpoint that returns prompt log-probabilities; say so before
    any request when this one cannot (the backend's own check: one short probe)."""
    check = getattr(backend, "check_choice_scoring", None)
    if check is None:
        raise RunError(f"--mcqa-scoring loglikelihood needs an OpenAI-compatible /v1/completions endpoint that "
                       f"returns prompt log-probabilities (echo with logprobs, as vLLM's server does); the "
                       f"{backend.describe().get('backend', type(backend).__name__)} backend cannot — "
                       "use --mcqa-scoring generate, or serve the model with `vllm serve`")
    await check()


async def answer_queue_by_batch(config: RunConfig, items: Iterable[tuple[str, PromptSource]], backend: Backend,
                           store: ResponseStore, failures: dict[str, Completion], stats: dict[str, Any],
                           notes: list[str], progress: ProgressSink) -> tuple[list[tuple[str, PromptSource]], int]:
    """``--batch``: the queue answered through the Batch API (:mod:`evalpipe.backends.batch`); what is
    left for direct requests (failed lines with ``--batch-retry direct``) is returned with its count."""
    from evalpipe.backends.batch import BatchOptions, answer_by_batch

    if not config.base_url:
        raise RunError("--batch needs --base-url: the Batch API's root (e.g. https://api.openai.com/v1)")
    options = BatchOptions(base_url=config.base_url, api_key_env=config.api_key_env, timeout_s=config.timeout_s,
                           max_retries=config.max_retries, **config.batch)
    result = await answer_by_batch(items, backend.model, store, options, say_batch_progress, progress.advance)
    failures.update(result.failures)
    stats["batch"] = result.stats()
    notes.extend(result.notes)
    return result.direct, len(result.direct)


def say_batch_progress(line: str) -> None:
    """A batch run's progress line, on stderr (the batch waits; no progress bar runs meanwhile)."""
    print(f"[evalpipe] {line}", file=sys.stderr, flush=True)
