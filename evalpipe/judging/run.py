"""The judge run: rate a finished run's free-text answers with a panel of judges, resumably.

Order of work, chosen (as in :mod:`evalpipe.pipeline`) so that mistakes cost nothing:

1. read the run directory (``config.json``, ``samples.jsonl``) — no data file, no task code needed,
   and the evaluated model is never contacted;
2. the patient-data guard (:func:`evalpipe.judging.panel.check_patient_data`) — before any connection;
3. load every task's rubric, check the human ratings file if one is given
   (:mod:`evalpipe.judging.humans`), and render every judge request (a rubric error fails here);
4. under the run directory's lock, look every (judge, rubric, sample, answer) up in the store; only
   what has no final reply is sent;
5. send each judge its requests concurrently through the same
   :class:`~evalpipe.backends.base.Backend` protocol as any model (retries, adaptive concurrency);
   each reply — usable or not — is committed to the store the moment it arrives; an unusable reply
   is asked again once (:meth:`evalpipe.judging.rubric.Rubric.retry`); a request that fails for good
   is not stored, so the next ``evalpipe judge`` asks again;
6. write the results into the run directory (:mod:`evalpipe.judging.attach`).

Judges decode greedily (temperature 0) with ``max_tokens`` 512 by default: ratings should not be a
draw, and a rationale of a few sentences fits. These settings are part of every request key.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe import __version__
from evalpipe.backends.base import Backend
from evalpipe.store.answers import ResponseStore
from evalpipe.store.judgements import StoredJudgement
from evalpipe.store.keys import cache_key
from evalpipe.config import RunConfig
from evalpipe.judging.attach import attach_to_files
from evalpipe.judging.human_file import read_human_ratings
from evalpipe.judging.humans import HumanRatings, human_record, store_human_ratings
from evalpipe.judging.items import JudgedItem, TaskToJudge, judgeable_tasks
from evalpipe.judging.panel import Judge, check_panel, check_patient_data, model_key
from evalpipe.judging.parse import parse_judgement
from evalpipe.judging.rubric import Rubric, rubric_for
from evalpipe.outcome import RunError
from evalpipe.paths import REPO_ROOT
from evalpipe.pipeline.progress import NullProgress, ProgressSink
from evalpipe.records import Completion, GenerationParams, Prompt
from evalpipe.results import RunDir, git_commit

__all__ = ["JudgeOptions", "JudgeOutcome", "JudgeProgress", "execute_judging", "judge_backend"]


@dataclass(frozen=True)
class JudgeOptions:
    #: task (None = every judged task) → rubric file or name under prompts/
    rubrics: Mapping[str | None, str | Path] = field(default_factory=dict)
    allow_external_endpoint: bool = False
    max_tokens: int = 512
    concurrency: int = 8
    timeout_s: float = 120.0
    max_retries: int = 6
    #: a CSV of human ratings to check the judges against (:mod:`evalpipe.judging.humans`)
    human_ratings: str | None = None

    @property
    def params(self) -> GenerationParams:
        return GenerationParams(max_tokens=self.max_tokens, temperature=0.0)


@dataclass
class JudgeOutcome:
    run_dir: RunDir
    #: task → its judge metrics (default scoring)
    metrics: dict[str, dict[str, Any]]
    #: judge requests sent now, and (sample, judge) pairs whose final reply was already stored
    sent: int = 0
    from_store: int = 0
    #: requests that failed for good (not stored: the next `evalpipe judge` asks again)
    failed_requests: int = 0
    #: (sample, judge) pairs whose reply was unusable after the retry
    unusable: int = 0
    notes: list[str] = field(default_factory=list)


#: what the judge run reports as it goes: (sample, judge) pairs done (the CLI's progress bar) — the
#: run's own progress protocol, told the same three things
JudgeProgress = ProgressSink


def judge_backend(judge: Judge, options: JudgeOptions) -> Backend:
    """A judge's backend: the same factory (and HTTP client) that evaluated models get."""
    from evalpipe.backends.factory import make_backend

    return make_backend(RunConfig(tasks=(), model=judge.model, base_url=judge.url, api_key_env=judge.api_key_env,
                                  concurrency=options.concurrency, timeout_s=options.timeout_s,
                                  max_retries=options.max_retries))


@dataclass(frozen=True)
class _Request:
    task: TaskToJudge
    item: JudgedItem
    rubric: Rubric
    prompt: Prompt


def _request_key(judge: str, prompt: Prompt, rubric: Rubric, item: JudgedItem) -> str:
    """Everything that can change a judge's reply: judge model, rubric, sample, rendered request, params."""
    blob = json.dumps({"judge": judge, "rubric": rubric.sha256, "task": item.task, "sample": item.sample_id,
                       "answer": item.answer_sha256, "request": cache_key(judge, prompt)}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def self_judging_notes(config: Mapping[str, Any], judges: Sequence[Judge]) -> list[str]:
    """A line for each judge that is the evaluated model itself (by name or served id)."""
    evaluated = str((config.get("config") or {}).get("model") or "")
    served = str((config.get("backend") or {}).get("model") or evaluated)
    notes = []
    for judge in judges:
        if evaluated and (model_key(judge.model) == model_key(evaluated) or judge.model == served):
            notes.append(f"judge {judge.model} is the evaluated model ({evaluated}): LLM judges tend to prefer their "
                         "own answers (self-preference); the report flags it — prefer judges that are not evaluated")
    return notes


#: what progress is told for a pair answered from the store
_STORED = Completion(text="")


class _Judging:
    """One judge's pending requests, sent through its backend, each reply stored on arrival."""

    def __init__(self, judge: Judge, backend: Backend, store: ResponseStore,
                 stored: Mapping[tuple[str, str, str, str, str], Mapping[int, StoredJudgement]],
                 progress: JudgeProgress, outcome: JudgeOutcome) -> None:
        self.judge, self.backend, self.store, self.stored = judge, backend, store, stored
        self.progress, self.outcome = progress, outcome

    def _put(self, request: _Request, attempt: int, key: str, completion: Completion, ratings: Any,
             problem: str | None) -> StoredJudgement:
        row = StoredJudgement(
            judge=self.judge.model, rubric_sha256=request.rubric.sha256, task=request.item.task,
            sample_id=request.item.sample_id, answer_sha256=request.item.answer_sha256, attempt=attempt,
            request_key=key, text=completion.text or "", ratings=ratings, problem=problem,
            prompt_tokens=completion.usage.prompt_tokens, completion_tokens=completion.usage.completion_tokens,
            latency_s=completion.latency_s, endpoint=completion.endpoint_url,
        )
        self.store.put_judgement(row)
        return row

    async def _reply(self, request: _Request, attempt: int, prompt: Prompt) -> tuple[StoredJudgement | None, Completion]:
        """The stored reply to this exact request, else a fresh one (stored on arrival); None when the
        request failed for good. Also what progress is told (the fresh completion, or ``_STORED``)."""
        item = request.item
        key = _request_key(self.judge.model, prompt, request.rubric, item)
        stored = self.stored.get((self.judge.model, request.rubric.sha256, item.task, item.sample_id,
                                  item.answer_sha256), {}).get(attempt)
        if stored is not None and stored.request_key == key:
            return stored, _STORED
        completion = await self.backend.complete(prompt)
        self.outcome.sent += 1
        if not completion.ok:
            self.outcome.failed_requests += 1
            return None, completion
        read = parse_judgement(completion.text, list(request.rubric.criteria), request.rubric.scale)
        return self._put(request, attempt, key, completion, read.ratings, read.problem), completion

    async def rate(self, request: _Request) -> None:
        """One (sample, judge) pair to its end: a usable reply, two unusable ones, or a failed request.
        Progress counts pairs (a retry belongs to its pair)."""
        rubric = request.rubric
        first, last = await self._reply(request, 1, request.prompt)
        if first is not None:
            read = parse_judgement(first.text, list(rubric.criteria), rubric.scale)
            if not read.usable:
                retry = rubric.retry(request.prompt, first.text, read.problem or "unusable")
                second, last = await self._reply(request, 2, retry)
                if second is not None and not parse_judgement(second.text, list(rubric.criteria), rubric.scale).usable:
                    self.outcome.unusable += 1
        self.progress.advance(last)

    async def run(self, requests: Sequence[_Request], workers: int) -> None:
        queue = iter(requests)

        async def worker() -> None:
            for request in queue:
                await self.rate(request)

        await asyncio.gather(*(worker() for _ in range(max(1, min(workers, len(requests))))))


def _final(replies: Mapping[int, StoredJudgement], rubric: Rubric) -> bool:
    """Whether a (sample, judge) pair needs nothing more: a usable reply, or two unusable ones."""
    first = replies.get(1)
    if first is None:
        return False
    if parse_judgement(first.text, list(rubric.criteria), rubric.scale).usable:
        return True
    return 2 in replies


def _judging_record(judges: Sequence[Judge], tasks: Sequence[TaskToJudge], rubrics: Mapping[str, Rubric],
                    options: JudgeOptions, previous: Mapping[str, Any] | None,
                    humans: HumanRatings | None = None) -> dict[str, Any]:
    previous = previous or {}
    kept = {"human_ratings": human_record(humans)} if humans is not None else (
        {"human_ratings": previous["human_ratings"]} if previous.get("human_ratings") else {})
    return {**kept,
        "judges": [j.describe() for j in judges],
        "params": options.params.sampling_options(),
        "tasks": {t.name: {"rubric": rubrics[t.name].name, "rubric_path": str(rubrics[t.name].path),
                           "rubric_sha256": rubrics[t.name].sha256, "criteria": dict(rubrics[t.name].criteria),
                           "scale": list(rubrics[t.name].scale), "credentialed": t.credentialed}
                  for t in tasks},
        "allow_external_endpoint": options.allow_external_endpoint,
        "evalpipe_version": __version__,
        "git_commit": git_commit(REPO_ROOT),
        "created": previous.get("created", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


BackendFactory = Callable[[Judge, JudgeOptions], Backend]


def _prepare(run: RunDir, judges: Sequence[Judge], options: JudgeOptions
             ) -> tuple[dict[str, Any], list[TaskToJudge], dict[str, Rubric], list[_Request], HumanRatings | None]:
    """Steps 1–3 of the module docstring: nothing is sent and no lock is taken."""
    check_panel(judges)
    config = run.read_config()
    if not run.samples_path().is_file():
        raise RunError(f"{run.samples_path()}: no samples yet; finish the run (or `evalpipe score {run.path}`) first")
    tasks = judgeable_tasks(config, run.read_samples())
    if not tasks:
        names = ", ".join((config.get("config") or {}).get("tasks") or []) or "none"
        raise RunError(f"{run.path}: no task of this run has free-text answers to judge (its tasks: {names}; judged "
                       "tasks declare answer_kind free_text, e.g. the summarisation and generation tasks)")
    unknown = [t for t in options.rubrics if t is not None and t not in {task.name for task in tasks}]
    if unknown:
        raise RunError(f"--judge-rubric {unknown[0]}=…: not a judged task of this run "
                       f"(judged: {', '.join(t.name for t in tasks)})")
    check_patient_data([t.name for t in tasks if t.credentialed and t.items], judges, options.allow_external_endpoint)
    rubrics = {t.name: rubric_for(t, options.rubrics) for t in tasks}
    humans = None
    if options.human_ratings is not None:  # checked whole before any request
        humans = read_human_ratings(Path(options.human_ratings), tasks,
                                    {t.name: list(rubrics[t.name].criteria) for t in tasks},
                                    {t.name: rubrics[t.name].scale for t in tasks}, [j.model for j in judges])
    requests = [_Request(t, item, rubrics[t.name], rubrics[t.name].render(t, item, options.params))
                for t in tasks for item in t.items]
    return config, tasks, rubrics, requests, humans


async def execute_judging(run_path: Path, judges: Sequence[Judge], options: JudgeOptions = JudgeOptions(),
                          backend_factory: BackendFactory = judge_backend,
                          progress: JudgeProgress | None = None) -> JudgeOutcome:
    """Judge a run's free-text answers (or resume judging them) and write the results into it."""
    run = RunDir(run_path)
    progress = progress or NullProgress()
    config, tasks, rubrics, requests, humans = _prepare(run, judges, options)
    outcome = JudgeOutcome(run_dir=run, metrics={}, notes=self_judging_notes(config, judges))
    with run.lock():
        store = ResponseStore(run.store_path)
        backends: list[Backend] = []
        try:
            stored: dict[tuple[str, str, str, str, str], dict[int, StoredJudgement]] = {}
            for task in tasks:
                for row in store.judgements(task.name, [j.model for j in judges], rubrics[task.name].sha256):
                    stored.setdefault((row.judge, row.rubric_sha256, row.task, row.sample_id, row.answer_sha256),
                                      {})[row.attempt] = row
            pending: dict[str, list[_Request]] = {}
            for judge in judges:
                for request in requests:
                    item = request.item
                    replies = stored.get((judge.model, request.rubric.sha256, item.task, item.sample_id,
                                          item.answer_sha256), {})
                    if _final(replies, request.rubric) and all(
                            r.request_key == _request_key(judge.model, request.prompt, request.rubric, item)
                            for a, r in replies.items() if a == 1):
                        outcome.from_store += 1
                    else:
                        pending.setdefault(judge.model, []).append(request)
            workers: list[_Judging] = []
            for judge in judges:
                if pending.get(judge.model):
                    backend = backend_factory(judge, options)
                    backends.append(backend)
                    await backend.preflight()
                    workers.append(_Judging(judge, backend, store, stored, progress, outcome))
            current = run.read_config()  # as it is now, under the lock
            if humans is not None:
                store_human_ratings(run.path, humans)
            run.write_json(run.config_path, {**current, "judging": _judging_record(
                judges, tasks, rubrics, options, current.get("judging"), humans)})
            total = len(requests) * len(judges)
            if workers:
                progress.start(total=total, cached=outcome.from_store)
                try:
                    await asyncio.gather(*(w.run(pending[w.judge.model], options.concurrency) for w in workers))
                finally:
                    progress.close()
            outcome.metrics = attach_to_files(run)
        finally:
            for backend in backends:
                await backend.aclose()
            store.close()
    missing = sum(len(t.unanswered) for t in tasks)
    if missing:
        outcome.notes.append(f"{missing} sample(s) have no answer (their request failed) and were not judged; "
                             "re-run the evaluation to retry them, then judge again")
    return outcome
