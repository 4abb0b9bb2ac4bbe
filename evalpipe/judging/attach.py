"""Judge results in the run directory: written by ``evalpipe judge``, kept by ``run`` and ``score``.

What is judged, by whom and with which rubric is recorded in ``config.json`` under ``judging``
(written by the judge run); the judges' replies are in the run's store (table ``judgements``). From
those two, :func:`task_sheets` rebuilds every judged task's :class:`~evalpipe.judging.judge_metrics.JudgeSheet`
without a model or a judge, and the results are merged into the task's entries:

* ``metrics.json`` — the judge metrics under the task, after the task's own;
* ``samples.jsonl`` — each judged sample's ``judge`` field (ratings per judge, their mean, failures,
  rationales) and its judge ``parts``;
* ``summary.json`` — the judge metrics' declared aggregations, why ``judge_n`` has no interval,
  what was not computed, and ``notes.judging`` (judges, rubric and its sha256, per-judge counts of
  rated / unusable / missing / retried, whether external judges were allowed).

Re-scoring (``evalpipe score``) and a resumed ``run`` write their files through
:func:`evalpipe.outcome.write_outcome`, which calls :func:`attach_to_outcome`: judge metrics are
never dropped by re-scoring, and they follow the answers' current text (a judgement is looked up by
the sha256 of the judged answer). Every scoring's files get them (``--compat`` does not change the
answer a judge read).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from evalpipe.store.answers import ResponseStore
from evalpipe.store.judgements import StoredJudgement
from evalpipe.judging.judge_metrics import JudgeSheet, Verdict, judge_sheet, verdict
from evalpipe.judging.humans import add_human_metrics, load_human_ratings
from evalpipe.judging.items import judgeable_tasks
from evalpipe.results import RunDir, TaskSummary
from evalpipe.samples_file import write_samples

if TYPE_CHECKING:
    from evalpipe.scoring import TaskOutcome

__all__ = ["attach_to_files", "attach_to_outcome", "is_judge_metric", "task_sheets"]

_COMPAT_METRICS = re.compile(r"metrics\.(.+)\.json\Z")


def is_judge_metric(name: str) -> bool:
    """A metric the judging writes (``human_alpha_<c>``, the humans' own agreement, included)."""
    return name.startswith(("judge_", "judge[", "human_alpha_"))


def _is_judge_part(key: str) -> bool:
    return key.startswith(("judge.", "judge["))


def task_sheets(run: RunDir, config: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> dict[str, JudgeSheet]:
    """Task → its judge results, from ``config.json``'s ``judging`` and the stored replies (module docstring)."""
    judging = config.get("judging")
    if not isinstance(judging, Mapping) or not run.store_path.is_file():
        return {}
    judges = [str(j["model"]) for j in judging.get("judges") or []]
    recorded = judging.get("tasks") or {}
    humans = load_human_ratings(run.path, config)
    sheets: dict[str, JudgeSheet] = {}
    store = ResponseStore(run.store_path)
    try:
        for task in judgeable_tasks(config, records):
            info = recorded.get(task.name)
            if not isinstance(info, Mapping):
                continue
            criteria = list(info.get("criteria") or {})
            scale = (int(info["scale"][0]), int(info["scale"][1]))
            replies: dict[tuple[str, str, str], dict[int, StoredJudgement]] = {}
            for row in store.judgements(task.name, judges, str(info.get("rubric_sha256"))):
                replies.setdefault((row.judge, row.sample_id, row.answer_sha256), {})[row.attempt] = row
            current = {(item.sample_id, item.answer_sha256) for item in task.items}
            usage = {j: {"replies": 0, "prompt_tokens": 0, "completion_tokens": 0} for j in judges}
            for (judge, sid, answer), rows in replies.items():
                if (sid, answer) in current:
                    for row in rows.values():
                        usage[judge]["replies"] += 1
                        usage[judge]["prompt_tokens"] += row.prompt_tokens or 0
                        usage[judge]["completion_tokens"] += row.completion_tokens or 0
            verdicts: dict[str, dict[str, Verdict]] = {
                item.sample_id: {j: verdict(replies.get((j, item.sample_id, item.answer_sha256), {}), criteria, scale)
                                 for j in judges}
                for item in task.items
            }
            notes = {"rubric": info.get("rubric"), "rubric_sha256": info.get("rubric_sha256"),
                     "credentialed": task.credentialed,
                     "allow_external_endpoint": bool(judging.get("allow_external_endpoint")),
                     # what the judges were sent and wrote (the replies of the current answers, retries included)
                     "usage": usage}
            sheets[task.name] = judge_sheet(task, judges, criteria, scale, verdicts, notes)
            if humans is not None:
                add_human_metrics(sheets[task.name], task, judges, criteria, scale, humans,
                                  strict=bool(os.environ.get("EVALPIPE_STRICT_AGGREGATIONS")))
    finally:
        store.close()
    return sheets


def _strip(metrics: dict[str, Any], records: Sequence[dict[str, Any]], summary: TaskSummary) -> TaskSummary:
    """Remove earlier judge results (a new panel replaces the old one)."""
    for name in [m for m in metrics if is_judge_metric(m)]:
        del metrics[name]
    for record in records:
        record.pop("judge", None)
        if isinstance(record.get("parts"), dict):
            record["parts"] = {k: v for k, v in record["parts"].items() if not _is_judge_part(k)}
    notes = {k: v for k, v in summary.notes.items() if k != "judging"}
    return replace(
        summary,
        aggregations={m: a for m, a in summary.aggregations.items() if not is_judge_metric(m)},
        no_interval={m: w for m, w in summary.no_interval.items() if not is_judge_metric(m)},
        not_computed={m: w for m, w in summary.not_computed.items() if not is_judge_metric(m)},
        notes=notes,
    )


def _apply(metrics: dict[str, Any], records: Sequence[dict[str, Any]], summary: TaskSummary,
           sheet: JudgeSheet) -> TaskSummary:
    metrics.update(sheet.metrics)
    for record in records:
        sid = str(record.get("id"))
        if sid in sheet.per_sample:
            record["judge"] = sheet.per_sample[sid]
            current = record.get("parts")
            parts = current if isinstance(current, dict) else {}
            record["parts"] = {**parts, **sheet.parts.get(sid, {})}
    return replace(
        summary,
        aggregations={**summary.aggregations, **{m: a.to_json() for m, a in sheet.aggregations.items()}},
        no_interval={**summary.no_interval, **sheet.fixed},
        not_computed={**summary.not_computed, **sheet.not_computed},
        notes={**summary.notes, "judging": sheet.notes},
    )


def attach_to_outcome(run: RunDir, tasks: Sequence[TaskOutcome]) -> None:
    """Merge the run's judge results into freshly scored tasks before they are written."""
    if not run.exists():
        return
    config = run.read_config()
    if not config.get("judging"):
        return
    sheets = task_sheets(run, config, [r for t in tasks for r in t.records])
    for task in tasks:
        if task.name in sheets:
            task.records = list(task.records)  # records are built when read (scoring.SampleRecords): keep them
            task.summary = _apply(task.metrics, task.records, task.summary, sheets[task.name])


def _scorings(run: RunDir) -> list[str | None]:
    """The scorings whose files the run directory holds: the default and each ``--compat`` one."""
    names: list[str | None] = [None] if run.metrics_path().is_file() else []
    for path in sorted(run.path.glob("metrics.*.json")):
        match = _COMPAT_METRICS.fullmatch(path.name)
        if match and run.samples_path(match.group(1)).is_file():
            names.append(match.group(1))
    return names


def attach_to_files(run: RunDir) -> dict[str, dict[str, Any]]:
    """Rewrite every scoring's samples/metrics/summary of the run with its current judge results.

    Returns task → judge metrics (of the default scoring). The caller holds the run's lock.
    """
    config = run.read_config()
    shown: dict[str, dict[str, Any]] = {}
    for compat in _scorings(run):
        records = run.read_samples(compat)
        metrics = run.read_metrics(compat)
        summary = run.read_summary(compat)
        sheets = task_sheets(run, config, records)
        by_task: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            by_task.setdefault(str(record.get("task")), []).append(record)
        tasks = dict(summary.tasks) if summary is not None else {}
        for name in set(sheets) | {t for t in metrics if t in by_task}:
            task_metrics = metrics.setdefault(name, {})
            task_summary = _strip(task_metrics, by_task.get(name, []), tasks.get(name, TaskSummary()))
            if name in sheets:
                task_summary = _apply(task_metrics, by_task.get(name, []), task_summary, sheets[name])
                if compat is None:
                    shown[name] = {m: v for m, v in task_metrics.items() if is_judge_metric(m)}
            tasks[name] = task_summary
        write_samples(run, [(records, None)], compat, config, run.read_variants(compat))
        run.write_json(run.metrics_path(compat), metrics)
        if summary is not None:
            run.write_summary(replace(summary, tasks=tasks), compat)
    return shown
