"""``evalpipe run --batch``: a run's pending prompts answered through the OpenAI Batch API.

Why the ``openai`` SDK here (and aiohttp everywhere else): the Batch API is five calls — upload a
JSONL file, create a batch, retrieve it until it ends, download its output and error files, cancel —
whose shapes (multipart upload, file content, the batch object) the SDK knows and keeps current;
none of them is on a hot path. It is imported only here, only when ``--batch`` is given.

How a batch run goes (:func:`answer_by_batch`):

1. the batches the store remembers as open (:mod:`evalpipe.backends.batch_ledger`) are polled
   again — a run killed while it waited resumes the very same batches;
2. the pending prompts no open batch carries are written as request lines
   (:mod:`evalpipe.backends.batch_lines`), one file per endpoint kind and at most
   ``max_requests`` lines each, uploaded, and a batch created for each; its id and keys are
   committed to the store before the first poll;
3. every open batch is polled every ``poll_s`` seconds, with a progress line (status, request
   counts, elapsed);
4. an ended batch's output file is read line by line, each answer committed to the store as it is
   read; its error file and any key without a line are failures;
5. failed lines are retried — in a new batch (``retry="batch"``, up to ``retry_rounds`` times) or
   returned for direct requests (``retry="direct"``) — or left failed (``retry="none"``); a batch that
   expired or was cancelled keeps the answers it has, and the rest are reported as failures (the
   same command asks them again).

A batch line answered is stored with its ``batch_id``, so cost can apply a batch discount.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from evalpipe.backends.base import BackendError, Credentials
from evalpipe.backends.batch_ledger import BatchLedger, BatchRow
from evalpipe.backends.batch_lines import BatchLineError, lines_of, read_output_line, request_line, url_of
from evalpipe.store.answers import ResponseStore
from evalpipe.records import Completion, Prompt

log = logging.getLogger(__name__)

__all__ = ["BatchOptions", "BatchOutcome", "answer_by_batch", "RETRY_CHOICES"]

#: a batch ended and its files can be read
_ENDED = ("completed", "expired", "cancelled", "failed")
RETRY_CHOICES = ("batch", "direct", "none")


@dataclass(frozen=True)
class BatchOptions:
    """How a batch run talks to the Batch API (none of it changes an answer: not the run's identity)."""

    base_url: str
    api_key_env: str = "OPENAI_API_KEY"
    poll_s: float = 30.0
    #: request lines per batch at most (OpenAI: 50,000)
    max_requests: int = 50_000
    #: what happens to failed lines: "batch" (a new batch), "direct" (direct requests), "none"
    retry: str = "batch"
    retry_rounds: int = 2
    completion_window: str = "24h"
    timeout_s: float = 120.0
    max_retries: int = 6
    completion_tokens_field: str = "max_tokens"

    def __post_init__(self) -> None:
        if self.retry not in RETRY_CHOICES:
            raise ValueError(f"--batch-retry must be one of {', '.join(RETRY_CHOICES)}, got {self.retry!r}")
        if self.poll_s <= 0:
            raise ValueError(f"--batch-poll must be a number of seconds > 0, got {self.poll_s}")
        if self.max_requests < 1:
            raise ValueError(f"--batch-size must be at least 1, got {self.max_requests}")


@dataclass
class BatchOutcome:
    """What the batches did: how many answers they stored, what failed, and what is left for direct
    requests (``retry="direct"``)."""

    batches: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    stored: int = 0
    failures: dict[str, Completion] = field(default_factory=dict)
    #: failed lines left for direct requests (``retry="direct"``), each with its prompt
    direct: list[tuple[str, Callable[[], Prompt]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def stats(self) -> dict[str, Any]:
        return {"batches": list(self.batches), "resumed_batches": list(self.resumed), "batch_answers": self.stored,
                "batch_failures": len(self.failures), "sent_direct_after_batch": len(self.direct)}


Say = Callable[[str], None]


def _client(options: BatchOptions) -> Any:
    import openai  # lazily: only a batch run pays its import

    return openai.AsyncOpenAI(base_url=options.base_url, api_key=os.environ.get(options.api_key_env) or "EMPTY",
                              timeout=options.timeout_s, max_retries=options.max_retries)


class _Api:
    """The five Batch API calls, each failure one scrubbed line (a BackendError)."""

    def __init__(self, options: BatchOptions) -> None:
        self.options = options
        self.client = _client(options)
        self.credentials = Credentials(os.environ.get(options.api_key_env), options.base_url)

    async def call(self, what: str, coro: Any) -> Any:
        try:
            return await coro
        except Exception as exc:  # the SDK's APIError family and transport errors alike
            import openai

            if not isinstance(exc, openai.OpenAIError):
                raise
            status = getattr(exc, "status_code", None)
            shown = self.credentials.scrub(" ".join(str(exc).split()))[:300]
            code = f" (HTTP {status})" if status else ""
            raise BackendError(f"Batch API at {self.credentials.scrub(self.options.base_url)}: {what} failed{code}: "
                               f"{shown}") from None

    async def submit(self, endpoint: str, lines: Sequence[str]) -> Any:
        data = ("\n".join(lines) + "\n").encode("utf-8")
        uploaded = await self.call("uploading the requests", self.client.files.create(
            file=("evalpipe-batch.jsonl", io.BytesIO(data)), purpose="batch"))
        return await self.call("creating the batch", self.client.batches.create(
            input_file_id=uploaded.id, endpoint=url_of(endpoint), completion_window=self.options.completion_window))

    async def retrieve(self, batch_id: str) -> Any:
        return await self.call(f"asking for batch {batch_id}", self.client.batches.retrieve(batch_id))

    async def content(self, file_id: str) -> str:
        reply = await self.call(f"downloading file {file_id}", self.client.files.content(file_id))
        return cast("str", reply.text)

    async def aclose(self) -> None:
        await self.client.close()


def _progress_line(batch: Any, started: float) -> str:
    counts = getattr(batch, "request_counts", None)
    done = getattr(counts, "completed", 0) or 0
    failed = getattr(counts, "failed", 0) or 0
    total = getattr(counts, "total", 0) or 0
    return (f"batch {batch.id}: {batch.status}, {done}/{total} done, {failed} failed, "
            f"{time.monotonic() - started:.0f}s elapsed")


async def _wait(api: _Api, ledger: BatchLedger, batch_id: str, options: BatchOptions, say: Say,
                started: float) -> Any:
    """Poll one batch until it has ended; a progress line (and the status in the ledger) whenever its
    status or counts change, and a line at least every ten polls."""
    last, polls = "", 0
    while True:
        batch = await api.retrieve(batch_id)
        line = _progress_line(batch, started)
        shown = line.rsplit(",", 1)[0]
        if shown != last or polls % 10 == 0:
            say(line)
            if shown.split(",")[0] != last.split(",")[0] and batch.status not in _ENDED:
                ledger.update(batch_id, batch.status)
            last = shown
        polls += 1
        if batch.status in _ENDED:
            return batch
        await asyncio.sleep(options.poll_s)


#: answers committed together while an output file is read
_COMMIT_LINES = 256


async def _read_results(api: _Api, batch: Any, keys: Sequence[str], store: ResponseStore,
                        model: str, on_stored: Callable[[Completion], None]) -> tuple[int, dict[str, Completion]]:
    """Store the answers of an ended batch as its lines are read (committed every
    ``_COMMIT_LINES`` lines); the failures by key (a key with no line fails with the batch's status)."""
    wanted = set(keys)
    seen: set[str] = set()
    failures: dict[str, Completion] = {}
    stored = 0
    group: list[tuple[str, Completion]] = []
    for file_id, name in ((getattr(batch, "output_file_id", None), "output"),
                          (getattr(batch, "error_file_id", None), "error")):
        if not file_id:
            continue
        text = await api.content(file_id)
        for number, line in lines_of(text):
            try:
                result = read_output_line(line, batch_id=batch.id, where=f"batch {batch.id} {name} file line {number}")
            except BatchLineError as exc:
                log.warning("%s", exc)
                continue
            if result.key not in wanted or result.key in seen:
                continue
            seen.add(result.key)
            if result.completion.ok:
                group.append((result.key, result.completion))
                stored += 1
                if len(group) >= _COMMIT_LINES:
                    _commit(store, model, group, on_stored)
                    group = []
            else:
                failures[result.key] = result.completion
    if group:
        _commit(store, model, group, on_stored)
    for key in keys:
        if key not in seen:
            failures[key] = Completion(text=None, error=f"batch {batch.id} {batch.status} without answering it",
                                       batch_id=batch.id)
    return stored, failures


def _commit(store: ResponseStore, model: str, group: list[tuple[str, Completion]],
            on_stored: Callable[[Completion], None]) -> None:
    """One committed group of answers; each counted (``on_stored``: the run's progress) once durable."""
    store.put_many(model, group)
    for _, completion in group:
        on_stored(completion)


def _by_endpoint(items: Iterable[tuple[str, Prompt]]) -> dict[str, list[tuple[str, Prompt]]]:
    groups: dict[str, list[tuple[str, Prompt]]] = {}
    for key, prompt in items:
        groups.setdefault(prompt.endpoint, []).append((key, prompt))
    return groups


async def _submit_all(api: _Api, ledger: BatchLedger, items: Sequence[tuple[str, Prompt]], model: str,
                      options: BatchOptions, say: Say, outcome: BatchOutcome, round_: int) -> None:
    for endpoint, group in _by_endpoint(items).items():
        for start in range(0, len(group), options.max_requests):
            part = group[start:start + options.max_requests]
            lines = [request_line(k, model, p, options.completion_tokens_field) for k, p in part]
            batch = await api.submit(endpoint, lines)
            ledger.record(batch.id, endpoint, [k for k, _ in part], batch.status, {"round": round_})
            outcome.batches.append(batch.id)
            say(f"batch {batch.id}: submitted {len(part)} requests ({url_of(endpoint)})")


async def answer_by_batch(pending: Iterable[tuple[str, Callable[[], Prompt]]], model: str, store: ResponseStore,
                          options: BatchOptions, say: Say,
                          on_stored: Callable[[Completion], None] = lambda completion: None) -> BatchOutcome:
    """Answer ``pending`` through the Batch API (see the module docstring); answers go to ``store``.

    Every key of ``pending`` ends stored, in ``failures`` or (``retry="direct"``) in ``direct``."""
    outcome = BatchOutcome()
    ledger = BatchLedger(store.path)
    api = _Api(options)
    started = time.monotonic()
    try:
        waiting = ledger.waiting_keys()
        prompts: dict[str, Callable[[], Prompt]] = {}
        fresh: list[tuple[str, Prompt]] = []
        for key, source in pending:
            prompts[key] = source
            if key not in waiting:
                fresh.append((key, source()))
        open_batches = ledger.open()
        if open_batches:
            outcome.resumed = [b.id for b in open_batches]
            say(f"resuming {len(open_batches)} batch(es) from the store: {', '.join(outcome.resumed)}")
        if fresh:
            await _submit_all(api, ledger, fresh, model, options, say, outcome, 0)
        rounds = 0
        while True:
            batches = ledger.open()
            if not batches:
                break
            retry: dict[str, Completion] = {}
            for row in batches:
                retry.update(await _finish(api, ledger, row, store, model, options, say, started, outcome, on_stored))
            retry = {k: c for k, c in retry.items() if k in prompts}
            if not retry:
                break
            if options.retry == "batch" and rounds < options.retry_rounds:
                rounds += 1
                say(f"{len(retry)} failed line(s): sending them again in a new batch (round {rounds})")
                await _submit_all(api, ledger, [(k, prompts[k]()) for k in retry], model, options, say, outcome,
                                  rounds)
            elif options.retry == "direct":
                outcome.direct = [(k, prompts[k]) for k in retry]
                break
            else:
                outcome.failures.update(retry)
                break
        return outcome
    finally:
        ledger.close()
        await api.aclose()


async def _finish(api: _Api, ledger: BatchLedger, row: BatchRow, store: ResponseStore, model: str,
                  options: BatchOptions, say: Say, started: float, outcome: BatchOutcome,
                  on_stored: Callable[[Completion], None]) -> dict[str, Completion]:
    """Wait for one open batch, store its answers, close it in the ledger; the failed lines worth
    retrying (an expired or cancelled batch's unanswered lines are failures of the run instead)."""
    batch = await _wait(api, ledger, row.id, options, say, started)
    keys = ledger.keys(row.id)
    stored, failures = await _read_results(api, batch, keys, store, model, on_stored)
    outcome.stored += stored
    ledger.update(row.id, batch.status, done=True, info={"stored": stored, "failed": len(failures)})
    if batch.status == "completed":
        return failures
    note = (f"batch {row.id} {batch.status}: {stored} of {len(keys)} answers kept; {len(failures)} without an "
            "answer (run the same command again to ask them again)")
    say(note)
    outcome.notes.append(note)
    outcome.failures.update(failures)
    return {}
