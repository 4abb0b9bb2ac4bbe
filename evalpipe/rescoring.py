"""Re-score a run from its store: no model, no network.

The plan recorded in ``responses.sqlite`` says which prompt (and cache key) each sample used, so
a run killed before it wrote its results can be scored, and a template edited after the run does
not orphan its answers. The data files read now must be the ones the run read: each file the
task loads is hashed and must match a sha256 recorded by the run (runs recorded without digests
are not checked).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evalpipe.cache import ResponseStore
from evalpipe.conditions import Condition, plan_name
from evalpipe.config import RunConfig, load_options, task_args_for
from evalpipe.data.digest import file_sha256
from evalpipe.data.errors import DataError
from evalpipe.heap import frozen_heap
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Completion, Example
from evalpipe.outcome import RunError, RunOutcome, write_outcome
from evalpipe.results import RunDir, RunInfo
from evalpipe.robustness import ConditionOutcome, combine_tasks
from evalpipe.scoring import answer_prefix, score_task
from evalpipe.tasks.base import TaskSpec
from evalpipe.tasks.registry import task_of_run


@dataclass(frozen=True)
class StoredTask:
    """One task of a run rebuilt from its store: what ``score`` needs, without any model."""

    spec: TaskSpec
    examples: tuple[Example, ...]
    #: each sample's request key (its prompt is in the store)
    keys: tuple[str, ...]
    answers: tuple[Completion | None, ...]
    truncated: tuple[int, ...] = ()
    #: what the user should know about how the task was rebuilt (e.g. its task file changed)
    note: str | None = None
    #: the prompt condition (evalpipe.conditions) these answers were asked under; None = none asked
    condition: Condition | None = None
    #: the number of shots the condition's prompts showed
    shots: int = 0


def load_stored(run_path: Path) -> tuple[RunConfig, list[StoredTask]]:
    """Rebuild every task of a run from its recorded plan and stored answers.

    Uses the plan recorded in the store (which prompt each sample used), so it works for a run that
    was killed before writing results, and is unaffected by later template edits. Every file the
    task loads now must have a sha256 the run recorded — wherever it is found now (``--data-dir``,
    the default location) — otherwise answers would be compared against different gold.
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
            spec = spec.scored_by(config.choice_scoring)
            # shots are in the stored prompts: a shot file that is gone now is no reason not to re-score
            options = replace(load_options(config, name, task_info.get("split"), args=task_args_for(config, spec)),
                              shots=0)
            data = spec.load(options)
            recorded_digests = set(task_info.get("data_files", {}).values())
            for path in data.files if recorded_digests else ():
                if file_sha256(path) not in recorded_digests:
                    raise DataError(path, None, None, "changed since the run (its sha256 is not one the run "
                                    "recorded); re-scoring would compare answers against different gold")
            by_id = {ex.id: ex for ex in data.examples}
            # one plan per prompt condition the run recorded (evalpipe.conditions), else the task's own
            recorded_conditions = task_info.get("conditions") or [None]
            for recorded_condition in recorded_conditions:
                condition = Condition.from_json(recorded_condition) if recorded_condition is not None else None
                planned = plan_name(name, condition)
                plan = store.read_plan(planned)
                if not plan:
                    raise RunError(f"{run.path}: no plan stored for task {planned}")
                missing = [sid for sid, _, _ in plan if sid not in by_id]
                if missing:
                    raise RunError(f"{run.path}: task {name}: sample ids not in the data any more: {missing[:5]}")
                answers = store.get_many([key for _, key, _ in plan])
                examples = tuple(by_id[sid] for sid, _, _ in plan)
                if spec.ranking is not None:  # a retrieval task: bind each gold to its pool position again
                    examples = spec.ranking.plan(data, examples, options).examples
                tasks.append(StoredTask(
                    spec=spec,
                    examples=examples,
                    keys=tuple(key for _, key, _ in plan),
                    answers=tuple(answers.get(key) for _, key, _ in plan),
                    truncated=tuple(int(info.get("truncated_tokens", 0)) for _, _, info in plan),
                    condition=condition,
                    shots=int(recorded_condition.get("shot_count") or 0) if recorded_condition is not None else 0,
                    note=note,
                ))
        return config, tasks
    finally:
        store.close()


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
    with frozen_heap():  # the stored tasks live until the end: out of the collector's sight (evalpipe.heap)
        return _rescore_loaded(run, config, tasks, compat, metric_options)


def _rescore_loaded(run: RunDir, config: RunConfig, tasks: list[StoredTask], compat: str | None,
                    metric_options: Mapping[str, Any] | None) -> RunOutcome:
    options = MetricOptions.from_json({**config.metric_options, **(metric_options or {})})
    for task in tasks:
        task.spec.scoring(compat)  # unknown mode → error before any work
    outcome = RunOutcome(run_dir=run, tasks=[], notes=list(dict.fromkeys(t.note for t in tasks if t.note)))
    scored = []
    for task in tasks:
        outcome.cached += sum(1 for a in task.answers if a is not None)
        scored.append(ConditionOutcome(task.spec, task.condition, task.shots, score_task(
            task.spec, task.examples, task.keys, task.answers, compat, options,
            task.truncated, answer_prefix(task.spec, config),
        )))
    outcome.tasks.extend(combine_tasks(scored))  # a task's prompt conditions become one task again
    outcome.add_aggregates(config.suites, subset=config.limit is not None or config.ids is not None)
    previous = run.read_summary()
    kept = previous.run if previous is not None else RunInfo()
    write_outcome(run, outcome, compat, RunInfo(
        cached=outcome.cached, incomplete_suites=outcome.incomplete, skipped_tasks=kept.skipped_tasks,
        backend=kept.backend, fetch_seconds=kept.fetch_seconds, budget=kept.budget, rescored=True,
        metric_options=options.to_json(), notes=list(outcome.notes)))
    return outcome
