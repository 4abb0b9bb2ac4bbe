"""What a judge rates: the free-text answers of a finished run, read from the run directory alone.

A task says its answers are free text by declaring ``answer_kind = "free_text"``
(:class:`~evalpipe.tasks.base.TaskSpec`); the run records that (with ``judge_rubric``,
``credentialed`` and the task's description) in ``config.json``, so judging needs neither the data
files nor the task's code — a user's task file the judge has never heard of is judged the same way.
Runs recorded before these fields existed fall back to the registered task of the same name.

Each answered sample becomes a :class:`JudgedItem` with what ``samples.jsonl`` holds: the inputs the
model saw (after any context budgeting), the gold as recorded, and the answer. A sample whose request
failed for good has no answer to judge: it is listed as *unanswered*, not judged and not a judge
failure (re-running the evaluation retries it; a later ``judge`` then rates it).

**The judged text** (:func:`judged_text`) is the raw answer without a reasoning block (everything up
to the last ``</think>``, or an unclosed ``<think>`` and what follows it) and without surrounding
whitespace; nothing else is changed — formatting is part of clarity. It is the same for every
scoring (``--compat``), so one judgement serves them all. An empty answer is judged (it is what the
model said, and the judges rate it accordingly); skipping it would flatter the model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evalpipe.text.reasoning import strip_reasoning

__all__ = ["FREE_TEXT", "JudgedItem", "TaskToJudge", "judgeable_tasks", "judged_text", "task_declaration",
           "text_sha256"]

#: the answer kind judges rate
FREE_TEXT = "free_text"


def judged_text(answer: str) -> str:
    """The answer as judges see it (see the module docstring)."""
    return strip_reasoning(answer).answer.strip()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class JudgedItem:
    """One answered sample as a judge sees it."""

    task: str
    sample_id: str
    inputs: Mapping[str, Any]
    gold: Any
    answer: str
    answer_sha256: str


@dataclass(frozen=True)
class TaskToJudge:
    """A task of the run whose answers are judged, with its answered samples."""

    name: str
    description: str
    answer_kind: str
    #: the rubric the task declares (a template under prompts/), None = the default of its answer kind
    rubric: str | None
    credentialed: bool
    items: tuple[JudgedItem, ...]
    #: ids of samples without an answer (the evaluated model's request failed): nothing to judge
    unanswered: tuple[str, ...] = ()


def task_declaration(name: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """What the run recorded about a task for judging (``config.json`` ``tasks``), completed from the
    registered task of that name for runs recorded before judging existed."""
    declared = {key: record.get(key) for key in ("answer_kind", "judge_rubric", "credentialed", "description")}
    if "answer_kind" in record:
        declared["credentialed"] = bool(declared["credentialed"])
        declared["description"] = str(declared["description"] or "")
        return declared
    from evalpipe.tasks.registry import all_tasks  # older run: the task's code says it

    spec = all_tasks().get(name)
    return {
        "answer_kind": spec.answer_kind if spec else None,
        "judge_rubric": spec.judge_rubric if spec else None,
        "credentialed": bool(record.get("credentialed", spec.credentialed if spec else False)),
        "description": str(record.get("description") or (spec.description if spec else "")),
    }


def judgeable_tasks(config: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> list[TaskToJudge]:
    """The run's tasks with free-text answers, in run order, each with its answered samples."""
    recorded = config.get("tasks") or {}
    names = list((config.get("config") or {}).get("tasks") or recorded)
    by_task: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        by_task.setdefault(str(record.get("task")), []).append(record)
    out = []
    for name in names:
        declared = task_declaration(name, recorded.get(name) or {})
        if declared["answer_kind"] != FREE_TEXT:
            continue
        items, unanswered = [], []
        for record in by_task.get(name, []):
            answer = record.get("answer")
            if record.get("error") is not None or not isinstance(answer, str):
                unanswered.append(str(record.get("id")))
                continue
            text = judged_text(answer)
            items.append(JudgedItem(task=name, sample_id=str(record.get("id")), inputs=record.get("inputs") or {},
                                    gold=record.get("gold"), answer=text, answer_sha256=text_sha256(text)))
        out.append(TaskToJudge(name=name, description=declared["description"], answer_kind=FREE_TEXT,
                               rubric=declared["judge_rubric"], credentialed=declared["credentialed"],
                               items=tuple(items), unanswered=tuple(unanswered)))
    return out
