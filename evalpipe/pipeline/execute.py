"""Run (or resume) an evaluation: the stages wired together under the run directory's lock.

Order of work is chosen so that mistakes cost nothing:

1. prepare every task (:mod:`evalpipe.pipeline.prepare`: bad data or a broken template fails here,
   before any request) into a stage on disk (:mod:`evalpipe.pipeline.stage`), check where the data
   may go (:mod:`evalpipe.pipeline.endpoint_policy`), fit long prompts to the context
   (:mod:`evalpipe.pipeline.budget`);
2. under the run directory's lock, the store copies the staged plan (sample → cache key, each
   distinct prompt once) and queues every key it has no answer for (that is resume);
3. the queued prompts are sent concurrently (:mod:`evalpipe.pipeline.fetch`), each answer committed
   to the store the moment it arrives; meanwhile a forked child folds each samplewise task's pages
   as their answers commit (:mod:`evalpipe.pipeline.score_beside`: a large run only);
4. each task is parsed and scored — a page of the plan at a time, its examples read again from the
   data (:func:`evalpipe.scoring.score_chunks`), or its fold finished from the child's state — and
   ``samples.jsonl``, ``metrics.json`` and ``summary.json`` are written.

Memory is flat in the number of samples: no stage holds a sample from one stage to the next.
``evalpipe score`` is step 4 without a backend (:mod:`evalpipe.rescoring`).
"""

from __future__ import annotations

import contextlib
import logging
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evalpipe.backends.base import Backend, BackendError
from evalpipe.backends.factory import OnceFactory
from evalpipe.backends.ranking import RankingBackend
from evalpipe.config import RunConfig
from evalpipe.cost import Prices, attach_costs, task_costs
from evalpipe.heap import frozen_heap
from evalpipe.metrics.options import MetricOptions
from evalpipe.outcome import RunOutcome, write_outcome
from evalpipe.pipeline.answer_writer import AnswerWriter
from evalpipe.pipeline.budget import budget_all
from evalpipe.pipeline.config_record import write_config
from evalpipe.pipeline.endpoint_policy import check_endpoint_policy
from evalpipe.pipeline.fetch import (
    Answerer,
    EmbedderFactory,
    PromptSource,
    answer_queue_by_batch,
    answerer_backend,
    check_choice_scoring,
    embedder_for,
    fetch_answers,
    pending_queues,
    queued_prompts,
)
from evalpipe.pipeline.prepare import prepare
from evalpipe.pipeline.prepared import PreparedTask
from evalpipe.pipeline.progress import NullProgress, ProgressSink
from evalpipe.pipeline import score_beside
from evalpipe.pipeline.render import check_unchanged
from evalpipe.pipeline.score_beside import BesideJob, ScoringBeside
from evalpipe.pipeline.stage import PlanStage
from evalpipe.records import Completion
from evalpipe.rescoring import plan_chunks
from evalpipe.results import Budget, RunDir, RunDirError, RunInfo, os_problem
from evalpipe.scoring import answer_prefix, score_chunks
from evalpipe.scoring.fold import FoldState, TaskFold, TaskOutcome
from evalpipe.samples_file import extract_taker
from evalpipe.store import endpoint_identity
from evalpipe.store.answers import ResponseStore
from evalpipe.task_identity import definitions_tag
from evalpipe.tasks.base import TaskSpec
from evalpipe.variants.robustness import ConditionOutcome, combine_tasks


log = logging.getLogger(__name__)


def run_dir_for(config: RunConfig, results_root: Path, specs: Sequence[TaskSpec] = ()) -> RunDir:
    """The run's directory: ``--run-name``, else the default name and, for user task files, the
    digest of their definitions (:mod:`evalpipe.task_identity`)."""
    if config.run_name:
        return RunDir(results_root / config.run_name)
    tag = definitions_tag(specs)
    return RunDir(results_root / (config.default_run_name() + (f"__{tag}" if tag else "")))


async def execute(
    config: RunConfig,
    backend_factory: Callable[[RunConfig], Backend],
    results_root: Path,
    progress: ProgressSink | None = None,
    on_prepared: Callable[[RunDir, int, int], None] | None = None,
    embedder_factory: EmbedderFactory | None = None,
) -> RunOutcome:
    """Run (or resume) an evaluation and write its results. Raises RunError/BackendError early.

    ``backend_factory`` makes the generating model's backend; ``embedder_factory`` the embedding
    model of retrieval tasks (default: from the run's ``--embeddings-*`` options). Each is asked
    for only when some of its prompts have no stored answer."""
    progress = progress or NullProgress()
    skipped: dict[str, str] = {}
    notes: list[str] = []
    try:
        stage = PlanStage(results_root)  # beside the run directories: see evalpipe.pipeline.stage
    except OSError as exc:
        raise RunDirError(f"cannot create the run directory {run_dir_for(config, results_root).path}: "
                          f"{os_problem(exc).split(': ', 1)[-1]}") from None
    try:
        prepared = prepare(config, skipped, notes, stage)
        check_endpoint_policy(prepared, config)
        run = run_dir_for(config, results_root, [p.spec for p in prepared])
        previous_budget = run.read_config().get("budget") if run.exists() else None
        shared = OnceFactory(backend_factory)  # budgeting and fetching share one backend
        try:
            prepared, budget_info = await budget_all(prepared, config, previous_budget, shared)
            for p in prepared:
                p.spec.scoring(config.compat)  # an unknown --compat fails before any request
            with run.lock():
                return await _execute_locked(config, run, prepared, skipped, budget_info, shared, progress,
                                             on_prepared, embedder_factory or embedder_for, notes)
        finally:
            await shared.aclose()
    finally:
        stage.close()


async def _execute_locked(
    config: RunConfig,
    run: RunDir,
    prepared: list[PreparedTask],
    skipped: dict[str, str],
    budget_info: dict[str, Any],
    backend_factory: Callable[[RunConfig], Backend],
    progress: ProgressSink,
    on_prepared: Callable[[RunDir, int, int], None] | None,
    embedder_factory: EmbedderFactory,
    prepare_notes: Sequence[str] = (),
) -> RunOutcome:
    """Steps 2–4 of the module docstring, under the run directory's lock: plan, fetch, score, write."""
    store = ResponseStore(run.store_path)
    invoked = time.time()  # answers stored from now on are this invocation's (evalpipe.cost)
    backends: list[tuple[Backend, Answerer]] = []
    notes: list[str] = list(prepare_notes)
    heap = contextlib.ExitStack()
    try:
        identity = _checked_identity(config, store, notes)
        # the prepared tasks live until the end: out of the garbage collector's sight (evalpipe.heap)
        settle = heap.enter_context(frozen_heap())
        _store_plans(store, prepared, notes)
        queues = pending_queues(store, prepared)
        pending = sum(q.pending for q in queues)
        # the queues hold each key of every plan once, less the answered ones: with none answered, all
        total = store.distinct_keys([p.plan_name for p in prepared]) if store.has_answers() else pending
        if on_prepared is not None:
            on_prepared(run, total, pending)
        if config.batch.get("export"):  # `run --batch-export FILE`: the requests written, nothing sent
            return _export_only(config, run, prepared, skipped, budget_info, notes)
        options = MetricOptions.from_json(config.metric_options)
        # forked before any backend exists (no thread, no connection shared): see score_beside
        beside = _start_beside(config, run, prepared, pending, options)
        if beside is not None:
            heap.callback(beside.stop)
        identity = await _start_backends(config, queues, store, backend_factory, embedder_factory, identity, notes,
                                         backends)
        write_config(run, config, prepared, [b for b, _ in backends], skipped, budget_info.get("budget"),
                     endpoints=[i.to_json() for i in endpoint_identity.read(store)])
        fetched = _Fetched()
        if pending:
            fetched = await _fetch_all(config, backends, store, progress, identity, notes, total, pending)
            settle()  # what fetching made lives until the end too
        outcome = RunOutcome(run_dir=run, tasks=[], sent=pending, cached=total - pending,
                             skipped=skipped, budget=Budget.from_json(budget_info.get("budget")), notes=notes)
        states = _beside_states(beside, fetched.failures, notes) if beside is not None else {}
        _score(config, run, prepared, fetched.failures, outcome, options, states)
        scoring = {"beside_sending": sorted(prepared[i].plan_name for i in states),
                   "tail_seconds": round(beside.tail_seconds, 3)} if beside is not None and states else {}
        _write_results(config, run, prepared, outcome, options, fetched, notes, invoked, scoring)
        return outcome
    finally:
        heap.close()
        for backend, _ in backends:
            await backend.aclose()
        store.close()


@dataclass(frozen=True)
class _Fetched:
    """What fetching leaves for scoring and the summary: the backends' statistics, the requests that
    failed for good (their samples are scored as failures; the good answers are in the store), and
    how long fetching took."""

    stats: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, Completion] = field(default_factory=dict)
    seconds: float = 0.0


def _checked_identity(config: RunConfig, store: ResponseStore,
                      notes: list[str]) -> endpoint_identity.EndpointIdentity | None:
    """Who answers: the store's answers must be this endpoint's (evalpipe.store.endpoint_identity)."""
    identity = endpoint_identity.identity_of(config)
    if identity is not None:
        endpoint_identity.check(store, identity, config.reuse_answers_from_other_endpoint, notes)
    return identity


def _store_plans(store: ResponseStore, prepared: Sequence[PreparedTask], notes: list[str]) -> None:
    """Copy each staged plan into the store (a plan smaller than the stored one is said in a note)."""
    for p in prepared:
        before = store.plan_size(p.plan_name)
        if before > p.size:
            notes.append(f"{p.plan_name}: this run directory held {before} samples; its results now cover "
                         f"{p.size} (--limit/--ids). All answers stay stored: run without them "
                         "to restore the full results")
        store.write_staged_plan(p.plan_name, p.stage.path, p.plan_name, p.packer.texts)


async def _start_backends(config: RunConfig, queues: Sequence[Answerer], store: ResponseStore,
                          backend_factory: Callable[[RunConfig], Backend], embedder_factory: EmbedderFactory,
                          identity: endpoint_identity.EndpointIdentity | None, notes: list[str],
                          backends: list[tuple[Backend, Answerer]]) -> endpoint_identity.EndpointIdentity | None:
    """Build and check the backend of each queue with pending prompts, appended to ``backends`` as it
    is built (so the caller closes every one, even when a later check fails); the endpoint's identity
    with the server's model entry."""
    for queue in queues:
        if not queue.pending:
            continue
        backend = answerer_backend(config, queue, store, backend_factory, embedder_factory)
        backends.append((backend, queue))
        await backend.preflight()
        if identity is not None and not queue.prepared[0].pool:  # the generating model's server
            identity = await _identified(backend, identity, store, config, notes)
        if any(p.size and p.prompt(0).choices is not None and store.unanswered(p.plan_name)
               for p in queue.prepared):
            await check_choice_scoring(backend)
    return identity


async def _fetch_all(config: RunConfig, backends: Sequence[tuple[Backend, Answerer]], store: ResponseStore,
                     progress: ProgressSink, identity: endpoint_identity.EndpointIdentity | None,
                     notes: list[str], total: int, pending: int) -> _Fetched:
    """Answer every queue in turn, with the progress shown from the first request to the last."""
    fetched = _Fetched()
    progress.start(total=total, cached=total - pending)
    started = time.monotonic()
    try:
        for backend, queue in backends:
            writer = await _answer_queue(config, backend, queue, store, progress, fetched, notes)
            _count_commits(fetched.stats, writer)
            _keep_backend_stats(fetched.stats, backend, store, identity, notes)
    finally:
        progress.close()
    return replace(fetched, seconds=time.monotonic() - started)


async def _answer_queue(config: RunConfig, backend: Backend, queue: Answerer, store: ResponseStore,
                        progress: ProgressSink, fetched: _Fetched, notes: list[str]) -> AnswerWriter:
    """One queue's prompts answered (through the Batch API first with ``--batch``); the writer that
    committed the answers, for its statistics."""
    writer = AnswerWriter(store, backend.model)
    items: Iterable[tuple[str, PromptSource]] = queued_prompts(store, queue.queue, queue.texts())
    count = queue.pending
    if config.batch and not isinstance(backend, RankingBackend):
        items, count = await answer_queue_by_batch(config, items, backend, store, fetched.failures, fetched.stats,
                                                   notes, progress)
    await fetch_answers(items, backend, store, progress,
                        writer=writer, count=count, failures=fetched.failures,
                        workers=2 * max(config.concurrency, 1) * (1 + len(config.replicas)))
    return writer


def _count_commits(stats: dict[str, Any], writer: AnswerWriter) -> None:
    """Add one writer's commits to the run's ``store`` statistics (summed over the queues)."""
    commits = stats.setdefault("store", {"answers": 0, "commits": 0, "longest_commit_ms": 0.0})
    commits["answers"] += writer.stats.answers
    commits["commits"] += writer.stats.commits
    commits["longest_commit_ms"] = round(max(commits["longest_commit_ms"],
                                             writer.stats.longest_commit_s * 1e3), 3)


def _keep_backend_stats(stats: dict[str, Any], backend: Backend, store: ResponseStore,
                        identity: endpoint_identity.EndpointIdentity | None, notes: list[str]) -> None:
    """A backend's statistics into the run's (a ranker's under ``ranking``); the generating model's
    server fingerprints recorded with its identity."""
    if isinstance(backend, RankingBackend):
        stats.setdefault("ranking", {}).update(backend.stats())
        return
    stats.update(backend.stats())
    if identity is not None:
        endpoint_identity.add_fingerprints(store, identity, endpoint_identity.fingerprints_in(stats), notes)


def _start_beside(config: RunConfig, run: RunDir, prepared: Sequence[PreparedTask], pending: int,
                  options: MetricOptions) -> ScoringBeside | None:
    """The samplewise tasks folded beside the sending, in a child (None: scored after the sending)."""
    if not score_beside.wanted(pending):
        return None
    jobs = [BesideJob(i, p.spec, p.plan_name, p.examples, config.compat, options, answer_prefix(p.spec, config),
                      p.stage.folder, extract_taker(p.spec.name, p.spec.kind, p.condition is not None))
            for i, p in enumerate(prepared) if p.size and p.spec.scoring(config.compat).samplewise]
    if not jobs:
        return None
    try:
        return ScoringBeside.start(jobs, run.store_path, prepared[0].stage.folder)
    except OSError as exc:  # no fork to be had (a process limit, memory): scored after the sending
        log.info("no scoring beside the sending: %s", exc)
        return None


def _beside_states(beside: ScoringBeside, failures: Mapping[str, Completion], notes: list[str]) -> dict[int, FoldState]:
    """The folds of the tasks scored beside the sending (none, with a note, if the child gave none)."""
    states = beside.finish(failures)
    if states is None:
        notes.append(f"the scoring beside the sending gave no result: {beside.problem}; the tasks were scored "
                     "after the sending instead")
        return {}
    return states


def _score(config: RunConfig, run: RunDir, prepared: Sequence[PreparedTask], failures: dict[str, Completion],
           outcome: RunOutcome, options: MetricOptions, states: Mapping[int, FoldState]) -> None:
    """Score every task and prompt condition into ``outcome`` (a task's conditions become one task,
    :mod:`evalpipe.variants.robustness`) with the run's metric ``options``. A task folded beside the
    sending (``states``, by position) is finished from its fold's state."""
    check_unchanged(prepared)
    outcome.tasks.extend(combine_tasks([
        ConditionOutcome(p.spec, p.condition, len(p.shots), _scored(config, run, p, failures, options, states.get(i)))
        for i, p in enumerate(prepared)]))


def _scored(config: RunConfig, run: RunDir, p: PreparedTask, failures: Mapping[str, Completion],
            options: MetricOptions, state: FoldState | None) -> TaskOutcome:
    """One task scored from the store: its fold finished from ``state``, or every page folded now."""
    source = functools.partial(plan_chunks, run.store_path, p.plan_name, p.examples, failures)
    prefix = answer_prefix(p.spec, config)
    if state is not None:
        return TaskFold.resumed(p.spec, config.compat, options, prefix, state, source=source).finish()
    return score_chunks(p.spec, source, config.compat, options, prefix, scratch=p.stage.folder,
                        taker=extract_taker(p.spec.name, p.spec.kind, p.condition is not None))



def _write_results(config: RunConfig, run: RunDir, prepared: Sequence[PreparedTask], outcome: RunOutcome,
                   options: MetricOptions, fetched: _Fetched, notes: list[str], invoked: float,
                   scoring: dict[str, Any]) -> None:
    """Costs, suite aggregates, and the run directory's results (samples, metrics, summary).

    The costs are summed in SQL in a thread while samples.jsonl is written (SQLite lets go of the
    GIL while it works, and by now the scoring child is done: at 94,000 answers the query's ~0.45 s
    and the samples' ~0.3 s overlap); they join the metrics before metrics.json is written."""
    plans: dict[str, list[str]] = {}
    for p in prepared:
        plans.setdefault(p.spec.name, []).append(p.plan_name)
    prices = Prices.from_json(config.prices)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalpipe-costs") as pool:
        totals = pool.submit(task_costs, run.store_path, plans, prices, invoked)

        def info() -> RunInfo:
            cost = attach_costs(outcome.tasks, totals.result(), prices)
            outcome.add_aggregates(config.suites, subset=config.limit is not None or config.ids is not None)
            return RunInfo(
                sent=outcome.sent, cached=outcome.cached, incomplete_suites=outcome.incomplete,
                skipped_tasks=outcome.skipped, backend=dict(fetched.stats), fetch_seconds=fetched.seconds,
                budget=outcome.budget, metric_options=options.to_json(), notes=list(notes), cost=cost,
                scoring=scoring)

        write_outcome(run, outcome, config.compat, info)


async def _identified(backend: Backend, identity: endpoint_identity.EndpointIdentity, store: ResponseStore,
                      config: RunConfig, notes: list[str]) -> endpoint_identity.EndpointIdentity:
    """``identity`` with the server's ``/v1/models`` entry for the model, checked against the store's
    (the URL alone was checked before the plan was written)."""
    try:
        entry = endpoint_identity.entry_of(await backend.models(), config.model)
    except (AttributeError, BackendError):  # a backend that lists no models: the URL is the identity
        return identity
    if entry is None:
        return identity
    identity = replace(identity, entry=entry)
    endpoint_identity.check(store, identity, config.reuse_answers_from_other_endpoint, notes)
    return identity


def _export_only(config: RunConfig, run: RunDir, prepared: Sequence[PreparedTask], skipped: dict[str, str],
                 budget_info: dict[str, Any], notes: list[str]) -> RunOutcome:
    """Write the pending requests as Batch API lines (:mod:`evalpipe.backends.batch_files`) and stop:
    no backend is built, no request sent; the run directory holds the plan for ``batch-import``."""
    from evalpipe.backends.batch_files import export_pending

    out = Path(config.batch["export"])
    written = export_pending(run.store_path, config.model, out, config.batch.get("completion_tokens_field",
                                                                                  "max_tokens"))
    write_config(run, config, prepared, [], skipped, budget_info.get("budget"))
    notes.append(f"wrote {written} request line(s) to {out}; answer them offline (e.g. vllm run-batch -i {out} "
                 f"-o answers.jsonl), then: evalpipe batch-import {run.path} answers.jsonl")
    return RunOutcome(run_dir=run, tasks=[], sent=0, cached=0, skipped=skipped, notes=notes)
