"""Re-score a run from its store: no model, no network.

The plan recorded in ``responses.sqlite`` says which prompt (and cache key) each sample used, so
a run killed before it wrote its results can be scored, and a template edited after the run does
not orphan its answers. The data files read now must be the ones the run read: each file the
task loads is hashed and must match a sha256 recorded by the run (runs recorded without digests
are not checked).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evalpipe.store.answers import ResponseStore
from evalpipe.variants.conditions import Condition, plan_name
from evalpipe.config import RunConfig, load_options, task_args_for
from evalpipe.data.digest import file_sha256
from evalpipe.data.errors import DataError
from evalpipe.heap import frozen_heap
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Completion, Example
from evalpipe.outcome import RunError, RunOutcome, write_outcome
from evalpipe.pipeline.stage import scratch_folder
from evalpipe.results import RunDir, RunInfo
from evalpipe.variants.robustness import ConditionOutcome, combine_tasks
from evalpipe.cost import Prices, attach_costs, task_costs
from evalpipe.structured import structured_spec
from evalpipe.scoring import ScoringChunk, answer_prefix, score_chunks
from evalpipe.samples_file import extract_taker
from evalpipe.tasks.base import Examples, TaskSpec
from evalpipe.tasks.registry import task_of_run


@dataclass(frozen=True)
class StoredTask:
    """One task of a run rebuilt from its store: what ``score`` needs, without any model."""

    spec: TaskSpec
    #: the evaluated examples, in the plan's order (a stream is read again for every pass)
    examples: Examples
    #: the store, and the name of the plan there (each sample's key; its prompt is in the store)
    store_path: Path
    plan: str
    #: how many samples the plan has, and how many of them have a stored answer
    size: int
    answered: int
    #: what the user should know about how the task was rebuilt (e.g. its task file changed)
    note: str | None = None
    #: the prompt condition (evalpipe.variants.conditions) these answers were asked under; None = none asked
    condition: Condition | None = None
    #: the number of shots the condition's prompts showed
    shots: int = 0

    def chunks(self) -> Iterator[ScoringChunk]:
        """The samples, a page of the plan at a time, with their stored answers (:func:`plan_chunks`)."""
        return plan_chunks(self.store_path, self.plan, self.examples)


#: a page's answers among its keys (absent keys left out): the store's as they are, or as they arrive
AnswersOf = Callable[[ResponseStore, list[str]], Mapping[str, Completion]]


def plan_chunks(store_path: Path, plan: str, examples: Examples,
                failures: Mapping[str, Completion] | None = None,
                answers_of: AnswersOf = ResponseStore.get_many) -> Iterator[ScoringChunk]:
    """A plan's samples for scoring, a page of the plan at a time: the plan's examples read again
    from ``examples`` beside it, answers from the store (a request that failed for good, not stored,
    from ``failures``). Its own connection to the store: records are built when read, and may be
    read after the caller's connection is closed. Shared by a run and by re-scoring; ``answers_of``
    reads a page's answers (a fold beside the sending waits for them: evalpipe.pipeline.score_beside)."""
    failures = failures or {}
    store = ResponseStore(store_path)
    try:
        remaining = iter(examples)
        for page in store.plan_pages(plan):
            chunk = [_next_planned(remaining, sid, plan) for sid, _, _ in page]
            keys = [key for _, key, _ in page]
            answers = answers_of(store, keys)
            yield ScoringChunk(examples=chunk, keys=keys, answers=[answers.get(k, failures.get(k)) for k in keys],
                               truncated=[int(info.get("truncated_tokens", 0)) for _, _, info in page])
    finally:
        store.close()


def _next_planned(examples: Iterator[Example], sample_id: str, plan: str) -> Example:
    """The next example of the data with id ``sample_id``, skipping the ones the plan does not have
    (the plan follows the data's order: all of it, or a prefix under --limit)."""
    for example in examples:
        if example.id == sample_id:
            return example
    raise RunError(f"task {plan}: sample ids not in the data any more (or in another order): {sample_id!r}")


def load_stored(run_path: Path) -> tuple[RunConfig, list[StoredTask]]:
    """Rebuild every task of a run from its recorded plan and stored answers.

    Uses the plan recorded in the store (which prompt each sample used), so it works for a run that
    was killed before writing results, and is unaffected by later template edits. Every file the
    task loads now must have a sha256 the run recorded — wherever it is found now (``--data-dir``,
    the default location) — otherwise answers would be compared against different gold.

    Nothing per sample is held here: a plan follows the data's order (unless the run chose its
    samples with ``--ids``), so the data is read again, beside the plan, for each pass of scoring.
    """
    run = RunDir(run_path)
    recorded = run.read_config()
    settings = recorded.get("config")
    if not isinstance(settings, dict) or "model" not in settings or not settings.get("tasks"):
        raise RunError(f"{run.config_path}: not an evaluation run (written by something else, or by the old "
                       "`evalpipe retrieve`); `evalpipe show` prints its metrics")
    config = RunConfig.from_json(settings)
    if not run.store_path.is_file():
        raise RunError(f"{run.path}: no responses.sqlite; nothing to score")
    store = ResponseStore(run.store_path)
    try:
        tasks = []
        for name in config.tasks:
            task_info = recorded.get("tasks", {}).get(name, {})
            spec, note = task_of_run(name, task_info)
            spec = structured_spec(spec.in_form(config.prompt_form).scored_by(config.choice_scoring), config.structured)
            # shots are in the stored prompts: a shot file that is gone now is no reason not to re-score
            options = replace(load_options(config, name, task_info.get("split"), args=task_args_for(config, spec)),
                              shots=0)
            data = spec.load(options)
            recorded_digests = set(task_info.get("data_files", {}).values())
            for path in data.files if recorded_digests else ():
                if file_sha256(path) not in recorded_digests:
                    raise DataError(path, None, None, "changed since the run (its sha256 is not one the run "
                                    "recorded); re-scoring would compare answers against different gold")
            # one plan per prompt condition the run recorded (evalpipe.variants.conditions), else the task's own
            recorded_conditions = task_info.get("conditions") or [None]
            for recorded_condition in recorded_conditions:
                condition = Condition.from_json(recorded_condition) if recorded_condition is not None else None
                planned = plan_name(name, condition)
                size = store.plan_size(planned)
                if not size:
                    raise RunError(f"{run.path}: no plan stored for task {planned}")
                examples: Examples = data.examples
                if config.ids is not None or spec.ranking is not None:
                    examples = _held_in_plan_order(run, store, planned, name, data.examples)
                    if spec.ranking is not None:  # a retrieval task: bind each gold to its pool position again
                        examples = spec.ranking.plan(data, examples, options).examples
                tasks.append(StoredTask(
                    spec=spec, examples=examples, store_path=run.store_path, plan=planned, size=size,
                    answered=size - store.unanswered(planned), condition=condition,
                    shots=int(recorded_condition.get("shot_count") or 0) if recorded_condition is not None else 0,
                    note=note,
                ))
        return config, tasks
    finally:
        store.close()


def _held_in_plan_order(run: RunDir, store: ResponseStore, plan: str, task: str,
                        examples: Examples) -> tuple[Example, ...]:
    """The plan's examples, held in its order (a run with --ids, a retrieval task's bound golds)."""
    planned = [sid for sid, _, _ in store.read_plan(plan)]
    wanted = set(planned)
    by_id = {ex.id: ex for ex in examples if ex.id in wanted}
    missing = [sid for sid in planned if sid not in by_id]
    if missing:
        raise RunError(f"{run.path}: task {task}: sample ids not in the data any more: {missing[:5]}")
    return tuple(by_id[sid] for sid in planned)


def rescore(run_path: Path, compat: str | None = None, metric_options: Mapping[str, Any] | None = None) -> RunOutcome:
    """Re-parse and re-score a run's stored answers; no model, no network.

    ``metric_options`` override the recorded ones for this scoring (and are recorded in the
    summary). See :func:`load_stored` for what must hold for a run to be re-scored.
    """
    run = RunDir(run_path)
    run.read_config()  # not a run directory → clear error before a lock file is created
    with run.lock():
        return _rescore_locked(run, compat, metric_options)


def _rescore_locked(run: RunDir, compat: str | None, metric_options: Mapping[str, Any] | None) -> RunOutcome:
    config, tasks = load_stored(run.path)
    # the records' lines wait in a scratch folder beside the run (evalpipe.scoring.score_chunks)
    with frozen_heap(), scratch_folder(run.path.parent) as scratch:
        return _rescore_loaded(run, config, tasks, compat, metric_options, scratch)


def _rescore_loaded(run: RunDir, config: RunConfig, tasks: list[StoredTask], compat: str | None,
                    metric_options: Mapping[str, Any] | None, scratch: Path | None = None) -> RunOutcome:
    options = MetricOptions.from_json({**config.metric_options, **(metric_options or {})})
    for task in tasks:
        task.spec.scoring(compat)  # unknown mode → error before any work
    outcome = RunOutcome(run_dir=run, tasks=[], notes=list(dict.fromkeys(t.note for t in tasks if t.note)))
    scored = []
    for task in tasks:
        outcome.cached += task.answered
        scored.append(ConditionOutcome(task.spec, task.condition, task.shots, score_chunks(
            task.spec, task.chunks, compat, options, answer_prefix(task.spec, config), scratch=scratch,
            taker=extract_taker(task.spec.name, task.spec.kind, task.condition is not None),
        )))
    outcome.tasks.extend(combine_tasks(scored))  # a task's prompt conditions become one task again
    plans: dict[str, list[str]] = {}
    for task in tasks:
        plans.setdefault(task.spec.name, []).append(task.plan)
    # the answers' cost from the store (this invocation sent nothing: it costs 0)
    prices = Prices.from_json(config.prices)
    cost = attach_costs(outcome.tasks, task_costs(run.store_path, plans, prices, None), prices)
    outcome.add_aggregates(config.suites, subset=config.limit is not None or config.ids is not None)
    previous = run.read_summary()
    kept = previous.run if previous is not None else RunInfo()
    write_outcome(run, outcome, compat, RunInfo(
        cached=outcome.cached, incomplete_suites=outcome.incomplete, skipped_tasks=kept.skipped_tasks,
        backend=kept.backend, fetch_seconds=kept.fetch_seconds, budget=kept.budget, rescored=True,
        metric_options=options.to_json(), notes=list(outcome.notes), cost=cost))
    return outcome
